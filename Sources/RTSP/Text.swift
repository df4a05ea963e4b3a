extension StringProtocol {
    /// Without leading and trailing spaces, tabs and line ends (RTSP's modules avoid Foundation).
    public var trimmed: String {
        let isBlank: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0.isNewline }
        guard let first = firstIndex(where: { !isBlank($0) }), let last = lastIndex(where: { !isBlank($0) }) else { return "" }
        return String(self[first...last])
    }
}
