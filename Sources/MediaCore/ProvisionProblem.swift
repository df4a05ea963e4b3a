/// One thing wrong with a provision document, located by its JSON path.
public struct ProvisionProblem: Sendable, Hashable, CustomStringConvertible {
    /// e.g. `provision.streams[2].videoParams.videoWidth`
    public var path: String
    /// e.g. `must be even (got 853)`
    public var message: String

    public init(path: String, message: String) {
        self.path = path
        self.message = message
    }

    public var description: String { "\(path): \(message)" }
}

/// A provision that cannot be accepted; carries every problem found, not just the first.
public struct ProvisionError: Error, Sendable, CustomStringConvertible {
    public var problems: [ProvisionProblem]

    public init(problems: [ProvisionProblem]) {
        self.problems = problems
    }

    public init(path: String, message: String) {
        self.problems = [ProvisionProblem(path: path, message: message)]
    }

    public var description: String { problems.map(\.description).joined(separator: "\n") }
}
