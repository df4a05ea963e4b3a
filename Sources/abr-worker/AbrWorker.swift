import ArgumentParser
import Foundation
import FFmpegBridge
import MediaCore
import NodeApp
import Transcoder

/// Exit codes the README documents: scripts and stream managers branch on them.
enum ExitStatus: Int32 {
    case success = 0
    case failure = 1
    case invalidProvisionOrArguments = 2
    case badInput = 3
}

@main
struct AbrWorker: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "abr-worker",
        abstract: "Live ABR transcoding worker: one top variant in, a whole ladder out.",
        subcommands: [Transcode.self, LadderCommand.self, Validate.self, Serve.self, Simulate.self])

    /// ArgumentParser exits 64 on bad usage; this tool promises 2 for bad arguments or provisions.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asynchronous = command as? AsyncParsableCommand {
                try await asynchronous.run()
            } else {
                try command.run()
            }
        } catch {
            exit(status(for: error))
        }
    }

    static func status(for error: Error) -> ExitStatus {
        switch error {
        case let error as ProvisionError:
            printError(error.problems.map { "error: \($0)" }.joined(separator: "\n"))
            return .invalidProvisionOrArguments
        case let error as TranscodeError:
            printError("error: \(error)")
            if case .badInput = error { return .badInput }
            return .failure
        case let error as CLIError:
            printError("error: \(error.message)")
            return error.status
        default:
            let code = exitCode(for: error)
            let message = fullMessage(for: error)
            if code == .success {
                if !message.isEmpty { print(message) }
                return .success
            }
            if !message.isEmpty { printError(message) }
            return code == .validationFailure ? .invalidProvisionOrArguments : .failure
        }
    }

    static func exit(_ status: ExitStatus) -> Never {
        Foundation.exit(status.rawValue)
    }
}

struct CLIError: Error {
    var message: String
    var status: ExitStatus
}

func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}
