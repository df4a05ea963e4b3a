/// `printf`-style number text without `String(format:)`, which on Linux goes through Foundation's
/// CFString formatting and costs microseconds a call: a live rung renders its playlist (a
/// duration per part and segment) and names a part file three times a second.
public enum DecimalText {
    /// `value` with exactly `places` decimals (0–9), as `%.<places>f` writes it (ties may round
    /// the other way in the last place).
    public static func fixed(_ value: Double, places: Int) -> String {
        let places = min(max(places, 0), 9)
        var scale = 1
        for _ in 0..<places { scale *= 10 }
        let scaled = (abs(value) * Double(scale)).rounded()
        guard value.isFinite, scaled < 9e15 else { return String(value) }
        let units = Int(scaled)
        let sign = value < 0 && units != 0 ? "-" : ""
        guard places > 0 else { return sign + String(units) }
        return sign + String(units / scale) + "." + padded(units % scale, width: places)
    }

    /// `value` with leading zeros to at least `width` digits, as `%0<width>d` writes it.
    public static func padded(_ value: Int, width: Int) -> String {
        let digits = String(value.magnitude)
        let zeros = String(repeating: "0", count: max(0, width - digits.count - (value < 0 ? 1 : 0)))
        return (value < 0 ? "-" : "") + zeros + digits
    }
}
