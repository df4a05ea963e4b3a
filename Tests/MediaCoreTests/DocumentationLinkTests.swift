import Foundation
import Testing
import TestSupport

/// The manual's pages link to one another and into the code's folders: every relative link must
/// name a file that exists and, into a Markdown page, a heading it has (GitHub's anchor rules).
@Suite struct DocumentationLinkTests {
    static let pages = ["README.md"]
        + ["docs", "Benchmarks"].flatMap { folder in
            ((try? FileManager.default.contentsOfDirectory(atPath: repositoryFile(folder))) ?? [])
                .filter { $0.hasSuffix(".md") }.sorted().map { "\(folder)/\($0)" }
        }

    /// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped,
    /// spaces as `-`; a repeated heading gets `-1`, `-2`, ….
    static func anchors(of text: String) -> Set<String> {
        var seen: [String: Int] = [:]
        var anchors: Set<String> = []
        for line in lines(outsideCode: text) where line.hasPrefix("#") {
            let title = line.drop { $0 == "#" }
            guard title.first == " " else { continue }
            let plain = String(title.dropFirst())
                .replacing(/\[([^\]]*)\]\([^)]*\)/) { String($0.output.1) }
                .lowercased()
                .filter { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == " " }
                .replacingOccurrences(of: " ", with: "-")
            let count = seen[plain, default: 0]
            seen[plain] = count + 1
            anchors.insert(count == 0 ? plain : "\(plain)-\(count)")
        }
        return anchors
    }

    /// The page's lines outside fenced code blocks (a `#` in a shell example is not a heading).
    static func lines(outsideCode text: String) -> [String] {
        var inCode = false
        return text.split(separator: "\n", omittingEmptySubsequences: false).compactMap { line in
            if line.hasPrefix("```") {
                inCode.toggle()
                return nil
            }
            return inCode ? nil : String(line)
        }
    }

    @Test func everyRelativeLinkResolves() throws {
        #expect(Self.pages.contains("docs/operating.md") && Self.pages.contains("Benchmarks/README.md"), "\(Self.pages)")
        var broken: [String] = []
        var checked = 0
        for page in Self.pages {
            let text = try String(contentsOfFile: repositoryFile(page), encoding: .utf8)
            let folder = (page as NSString).deletingLastPathComponent
            for (number, line) in Self.lines(outsideCode: text).enumerated() {
                for match in line.matches(of: /\]\(([^)\s]+)\)/) {
                    let target = String(match.output.1)
                    if target.firstMatch(of: /^[a-z]+:/) != nil { continue }
                    checked += 1
                    let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
                    let path = parts[0].isEmpty ? page : ((folder as NSString).appendingPathComponent(String(parts[0])) as NSString).standardizingPath
                    guard FileManager.default.fileExists(atPath: repositoryFile(path)) else {
                        broken.append("\(page) line \(number + 1): \(target): no file \(path)")
                        continue
                    }
                    if parts.count == 2, path.hasSuffix(".md") {
                        let anchors = Self.anchors(of: try String(contentsOfFile: repositoryFile(path), encoding: .utf8))
                        if !anchors.contains(String(parts[1])) { broken.append("\(page) line \(number + 1): \(target): \(path) has no such heading") }
                    }
                }
            }
        }
        #expect(checked > 20, "only \(checked) links found")
        #expect(broken.isEmpty, "\(broken.joined(separator: "\n"))")
    }

    /// User documents speak of what the node does, not of the tracker that asked for it.
    @Test func userDocumentsNameNoIssueNumbers() throws {
        for page in Self.pages {
            let text = try String(contentsOfFile: repositoryFile(page), encoding: .utf8)
            let found = text.matches(of: /(?i)\bissues? #?\d+/).map { String($0.output) }
            #expect(found.isEmpty, "\(page) names \(found)")
        }
    }

    @Test func theReadmeStaysAManual() throws {
        let lines = try String(contentsOfFile: repositoryFile("README.md"), encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count <= 500, "README.md has \(lines.count) lines; move detail into docs/")
    }
}
