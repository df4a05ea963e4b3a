/// Whether two secrets (passwords, tokens, digest answers) are equal, in time that says nothing
/// about where they differ: every byte of the longer is compared, with no early exit, so a guess
/// that matches a longer prefix takes no less time than one that does not.
public func constantTimeEqual(_ a: String, _ b: String) -> Bool {
    let left = Array(a.utf8), right = Array(b.utf8)
    var difference: UInt = left.count == right.count ? 0 : 1
    for index in 0..<max(left.count, right.count) {
        let x = index < left.count ? left[index] : 0
        let y = index < right.count ? right[index] : 0
        difference |= UInt(x ^ y)
    }
    return difference == 0
}
