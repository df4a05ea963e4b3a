/// Reads a Stream Manager provision (2.0 object or one-element array, or a 1.0 `meta` document)
/// and validates it into a `Ladder`, reporting every problem with its JSON path.
public enum ProvisionParser {
    public static let levelRange = 1...10
    public static let dimensionRange = 16...4096
    public static let bitRateRange = 32_000...50_000_000
    public static let guidLengthRange = 3...256

    /// - Parameters:
    ///   - streamGuid: the top guid for a 1.0 meta document, which does not carry one;
    ///     defaults to `live/<name without _N>`.
    public static func parse(_ bytes: some Sequence<UInt8>, streamGuid: String? = nil) throws(ProvisionError) -> Ladder {
        let document: JSONValue
        do {
            document = try JSONReader.parse(bytes)
        } catch {
            throw ProvisionError(path: "provision", message: error.description)
        }
        return try parse(document, streamGuid: streamGuid)
    }

    public static func parse(_ document: JSONValue, streamGuid: String? = nil) throws(ProvisionError) -> Ladder {
        switch document {
        case let .array(elements):
            guard elements.count == 1 else {
                throw ProvisionError(path: "provision", message: "expected an array holding exactly one provision (got \(elements.count))")
            }
            return try parseStreamManager2(elements[0], path: "provision[0]")
        case .object:
            if document["meta"] != nil {
                return try parseStreamManager1(document, streamGuid: streamGuid)
            }
            return try parseStreamManager2(document, path: "provision")
        default:
            throw ProvisionError(path: "provision", message: "expected a provision object or an array holding one (got \(document.shortDescription))")
        }
    }

    /// Validates parts of one request built elsewhere (the HTTP API) with the same rules.
    public static func parseStreamManager2(_ value: JSONValue, path: String) throws(ProvisionError) -> Ladder {
        var problems = Problems()
        guard case .object = value else {
            throw ProvisionError(path: path, message: "expected an object (got \(value.shortDescription))")
        }
        let guidKey = value["provisionGuid"] != nil && value["streamGuid"] == nil ? "provisionGuid" : "streamGuid"
        let topGuid = problems.string(value[guidKey], path: "\(path).\(guidKey)", missing: "missing (a provision needs streamGuid or provisionGuid)")
        if let topGuid { problems.checkTopGuid(topGuid, path: "\(path).\(guidKey)") }

        var drafts: [VariantDraft] = []
        if let streams = problems.array(value["streams"], path: "\(path).streams") {
            for (index, stream) in streams.enumerated() {
                let streamPath = "\(path).streams[\(index)]"
                guard case .object = stream else {
                    problems.add(streamPath, "expected an object (got \(stream.shortDescription))")
                    continue
                }
                let params = stream["videoParams"]
                let paramsPath = "\(streamPath).videoParams"
                var draft = VariantDraft(index: index, path: streamPath)
                draft.guid = problems.string(stream["streamGuid"], path: "\(streamPath).streamGuid")
                draft.level = problems.integer(stream["abrLevel"], path: "\(streamPath).abrLevel")
                draft.levelPath = "\(streamPath).abrLevel"
                draft.guidPath = "\(streamPath).streamGuid"
                if problems.object(params, path: paramsPath) {
                    draft.bitRate = problems.integer(params?["videoBitRate"], path: "\(paramsPath).videoBitRate")
                    draft.width = problems.integer(params?["videoWidth"], path: "\(paramsPath).videoWidth")
                    draft.height = problems.integer(params?["videoHeight"], path: "\(paramsPath).videoHeight")
                    draft.preset = problems.choice(params?["preset"], among: EncoderChoices.presets, what: "an x264 preset", path: "\(paramsPath).preset")
                    draft.profile = problems.choice(params?["profile"], among: EncoderChoices.profiles, what: "an H.264 profile", path: "\(paramsPath).profile")
                }
                draft.bitRatePath = "\(paramsPath).videoBitRate"
                draft.widthPath = "\(paramsPath).videoWidth"
                draft.heightPath = "\(paramsPath).videoHeight"
                drafts.append(draft)
            }
            problems.checkCount(streams.count, path: "\(path).streams")
        }
        let credentials = problems.credentials(value["credentials"], path: "\(path).credentials")
        var ladder = try problems.finish(topGuid: topGuid, drafts: drafts, credentials: credentials)
        ladder.requiresSignedPlayback = try playbackFlag("signed", in: value["playback"], path: "\(path).playback")
        ladder.webRTCSafe = try playbackFlag("webrtcSafe", in: value["playback"], path: "\(path).playback")
        return ladder
    }

    /// One flag of `"playback"`: `{"signed": true}` asks viewers for a signed playback token,
    /// `{"webrtcSafe": true}` keeps B-frames out of every rung; absent or false: neither.
    static func playbackFlag(_ name: String, in value: JSONValue?, path: String) throws(ProvisionError) -> Bool {
        switch value {
        case nil, .null?: return false
        case .object?:
            switch value?[name] {
            case nil, .null?: return false
            case let .bool(flag)?: return flag
            case let other?: throw ProvisionError(path: "\(path).\(name)", message: "expected true or false (got \(other.shortDescription))")
            }
        case let other?:
            throw ProvisionError(path: path, message: "expected an object such as {\"signed\": true} (got \(other.shortDescription))")
        }
    }

    static func parseStreamManager1(_ value: JSONValue, streamGuid override: String?) throws(ProvisionError) -> Ladder {
        var problems = Problems()
        let meta = value["meta"]
        guard problems.object(meta, path: "meta"), let meta else { throw problems.error }
        var drafts: [VariantDraft] = []
        var names: [(name: String, path: String)] = []
        if let streams = problems.array(meta["stream"], path: "meta.stream") {
            for (index, stream) in streams.enumerated() {
                let streamPath = "meta.stream[\(index)]"
                guard case .object = stream else {
                    problems.add(streamPath, "expected an object (got \(stream.shortDescription))")
                    continue
                }
                var draft = VariantDraft(index: index, path: streamPath)
                if let name = problems.string(stream["name"], path: "\(streamPath).name") {
                    names.append((name, "\(streamPath).name"))
                    draft.name = name
                }
                draft.guidPath = "\(streamPath).name"
                draft.level = problems.integer(stream["level"], path: "\(streamPath).level")
                draft.levelPath = "\(streamPath).level"
                let properties = stream["properties"]
                let propertiesPath = "\(streamPath).properties"
                if problems.object(properties, path: propertiesPath) {
                    draft.bitRate = problems.integer(properties?["videoBR"], path: "\(propertiesPath).videoBR")
                    draft.width = problems.integer(properties?["videoWidth"], path: "\(propertiesPath).videoWidth")
                    draft.height = problems.integer(properties?["videoHeight"], path: "\(propertiesPath).videoHeight")
                }
                draft.bitRatePath = "\(propertiesPath).videoBR"
                draft.widthPath = "\(propertiesPath).videoWidth"
                draft.heightPath = "\(propertiesPath).videoHeight"
                drafts.append(draft)
            }
            problems.checkCount(streams.count, path: "meta.stream")
        }

        // 1.0 names variants without a scope ("stream1_1"); the scope comes from the caller.
        var topGuid = override
        if let override {
            problems.checkTopGuid(override, path: "--stream-guid")
        } else if let first = names.first {
            if let stem = stemOfVariantName(first.name) {
                topGuid = "live/\(stem)"
            } else {
                problems.add(first.path, "must be <name>_<level> (got \"\(first.name)\")")
            }
        }
        if let topGuid {
            let prefix = topGuid.split(separator: "/").dropLast().joined(separator: "/")
            for index in drafts.indices {
                if let name = drafts[index].name {
                    drafts[index].guid = prefix.isEmpty ? name : "\(prefix)/\(name)"
                }
            }
        }
        let credentials = problems.credentials(meta["authentication"], path: "meta.authentication")
        return try problems.finish(topGuid: topGuid, drafts: drafts, credentials: credentials)
    }

    /// `stream1_3` → `stream1`.
    static func stemOfVariantName(_ name: String) -> String? {
        guard let underscore = name.lastIndex(of: "_") else { return nil }
        let stem = name[..<underscore]
        let level = name[name.index(after: underscore)...]
        guard !stem.isEmpty, !level.isEmpty, level.allSatisfy(\.isASCIIDigit) else { return nil }
        return String(stem)
    }
}

private extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}

/// What was read of one variant before cross-variant checks; nil fields already have a problem.
private struct VariantDraft {
    var index: Int
    var path: String
    var name: String?
    var guid: String?
    var level: Int?
    var bitRate: Int?
    var width: Int?
    var height: Int?
    var preset: String?
    var profile: String?
    var guidPath = ""
    var levelPath = ""
    var bitRatePath = ""
    var widthPath = ""
    var heightPath = ""
}

private struct Problems {
    var list: [ProvisionProblem] = []

    var error: ProvisionError { ProvisionError(problems: list) }

    mutating func add(_ path: String, _ message: String) {
        list.append(ProvisionProblem(path: path, message: message))
    }

    mutating func string(_ value: JSONValue?, path: String, missing: String = "missing") -> String? {
        switch value {
        case nil: add(path, missing); return nil
        case let .string(s)?: return s
        case let other?: add(path, "expected a string (got \(other.shortDescription))"); return nil
        }
    }

    /// An optional string that must be one of `choices`; absent or null is nil.
    mutating func choice(_ value: JSONValue?, among choices: [String], what: String, path: String) -> String? {
        switch value {
        case nil, .null?: return nil
        case let .string(text)? where choices.contains(text): return text
        case let .string(text)?:
            add(path, "must be \(what): \(choices.joined(separator: ", ")) (got \"\(text.unicodeScalars.prefix(40).map { $0.escaped(asASCII: true) }.joined())\")")
            return nil
        case let other?: add(path, "expected a string (got \(other.shortDescription))"); return nil
        }
    }

    mutating func integer(_ value: JSONValue?, path: String) -> Int? {
        switch value {
        case nil: add(path, "missing"); return nil
        case let .integer(i)?:
            guard let int = Int(exactly: i) else { add(path, "out of range (got \(i))"); return nil }
            return int
        // 2500000.0 is an integer written by a tool that only knows doubles; 2.5 is not.
        case let .number(d)? where d.rounded() == d && abs(d) < 1e15:
            return Int(d)
        case let other?: add(path, "expected an integer (got \(other.shortDescription))"); return nil
        }
    }

    mutating func array(_ value: JSONValue?, path: String) -> [JSONValue]? {
        switch value {
        case nil: add(path, "missing"); return nil
        case let .array(a)?: return a
        case let other?: add(path, "expected an array (got \(other.shortDescription))"); return nil
        }
    }

    mutating func object(_ value: JSONValue?, path: String) -> Bool {
        switch value {
        case nil: add(path, "missing"); return false
        case .object?: return true
        case let other?: add(path, "expected an object (got \(other.shortDescription))"); return false
        }
    }

    mutating func checkCount(_ count: Int, path: String) {
        let range = ProvisionParser.levelRange
        if !range.contains(count) {
            add(path, "must hold \(range.lowerBound) to \(range.upperBound) variants (got \(count))")
        }
    }

    mutating func checkTopGuid(_ guid: String, path: String) {
        let range = ProvisionParser.guidLengthRange
        if !range.contains(guid.count) {
            add(path, "must be \(range.lowerBound) to \(range.upperBound) characters (got \(guid.count))")
            return
        }
        let segments = guid.split(separator: "/", omittingEmptySubsequences: false)
        if segments.count < 2 {
            add(path, "must be <scope>/[<room>/]<name> with at least one '/' (got \"\(guid)\")")
        } else if segments.contains(where: \.isEmpty) {
            add(path, "must not have empty path segments (got \"\(guid)\")")
        } else if segments.contains(where: { $0 == "." || $0 == ".." }) {
            add(path, "must not contain '.' or '..' segments (got \"\(guid)\")")
        } else if let bad = guid.unicodeScalars.first(where: { !Self.isGuidCharacter($0) }) {
            add(path, "may only contain letters, digits, '_', '-', '.' and '/' (got \"\(bad.escaped(asASCII: true))\" in \"\(guid)\")")
        }
    }

    static func isGuidCharacter(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "a"..."z", "A"..."Z", "0"..."9", "_", "-", ".", "/": return true
        default: return false
        }
    }

    /// `{"username": ..., "password": ...}`; absent, null or both empty means no authentication
    /// (SM 1.0 sends empty strings for that).
    mutating func credentials(_ value: JSONValue?, path: String) -> StreamCredentials? {
        switch value {
        case nil, .null?: return nil
        case .object?: break
        case let other?:
            add(path, "expected an object with username and password (got \(other.shortDescription))")
            return nil
        }
        var fields: [String] = []
        for key in ["username", "password"] {
            let fieldPath = "\(path).\(key)"
            switch value?[key] {
            case nil, .null?: fields.append("")
            case let .string(text)?:
                if text.utf8.count > 255 {
                    add(fieldPath, "must be at most 255 bytes (got \(text.utf8.count))")
                } else if text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F || $0 == "\"" || $0 == "\\" }) {
                    add(fieldPath, "must not contain control characters, '\"' or '\\'")
                } else if key == "username", text.contains(":") {
                    add(fieldPath, "must not contain ':' (RTSP Basic authentication separates user and password with it)")
                }
                fields.append(text)
            case let other?:
                add(fieldPath, "expected a string (got \(other.shortDescription))")
                fields.append("")
            }
        }
        if fields[0].isEmpty, fields[1].isEmpty { return nil }
        if fields[0].isEmpty { add("\(path).username", "must not be empty when a password is set") }
        return StreamCredentials(username: fields[0], password: fields[1])
    }

    mutating func finish(topGuid: String?, drafts: [VariantDraft], credentials: StreamCredentials?) throws(ProvisionError) -> Ladder {
        var seenLevels: [Int: String] = [:]
        for draft in drafts {
            if let level = draft.level {
                if level < 1 {
                    add(draft.levelPath, "must be 1 or more (got \(level))")
                } else if let earlier = seenLevels[level] {
                    add(draft.levelPath, "duplicates level \(level) of \(earlier)")
                } else {
                    seenLevels[level] = draft.path
                }
            }
            if let guid = draft.guid, let level = draft.level, let topGuid, guid != "\(topGuid)_\(level)" {
                add(draft.guidPath, "must be \"\(topGuid)_\(level)\" for level \(level) (got \"\(guid)\")")
            }
            for (value, path, what) in [(draft.width, draft.widthPath, "width"), (draft.height, draft.heightPath, "height")] {
                guard let value else { continue }
                let range = ProvisionParser.dimensionRange
                if !range.contains(value) {
                    add(path, "\(what) must be \(range.lowerBound) to \(range.upperBound) (got \(value))")
                } else if value % 2 != 0 {
                    add(path, "must be even (got \(value))")
                }
            }
            if let bitRate = draft.bitRate, !ProvisionParser.bitRateRange.contains(bitRate) {
                add(draft.bitRatePath, "bit rate must be 32000 to 50000000 bit/s (got \(bitRate))")
            }
        }
        // Levels must be exactly 1...n: a gap would leave an edge nothing to switch to.
        let levels = seenLevels.keys.sorted()
        if !levels.isEmpty, levels.count == drafts.count {
            for (expected, level) in zip(1..., levels) where expected != level {
                let path = seenLevels[level] ?? "provision"
                add("\(path).\(path.hasPrefix("meta") ? "level" : "abrLevel")", "levels must run 1, 2, 3... without gaps: level \(expected) is missing (got \(level))")
                break
            }
        }
        guard list.isEmpty, let topGuid else { throw error }

        let variants = drafts.map {
            Variant(streamGuid: $0.guid!, level: $0.level!, width: $0.width!, height: $0.height!, bitRate: $0.bitRate!,
                    preset: $0.preset, profile: $0.profile)
        }.sorted { $0.level < $1.level }
        let pathsByLevel = Dictionary(uniqueKeysWithValues: drafts.map { ($0.level!, $0) })
        for (higher, lower) in zip(variants, variants.dropFirst()) {
            let draft = pathsByLevel[lower.level]!
            if lower.bitRate >= higher.bitRate {
                add(draft.bitRatePath, "must be lower than level \(higher.level)'s \(higher.bitRate) (got \(lower.bitRate)): bit rate must fall as the level number grows")
            }
            if lower.width > higher.width {
                add(draft.widthPath, "must not exceed level \(higher.level)'s \(higher.width) (got \(lower.width)): size must not grow as the level number grows")
            }
            if lower.height > higher.height {
                add(draft.heightPath, "must not exceed level \(higher.level)'s \(higher.height) (got \(lower.height)): size must not grow as the level number grows")
            }
        }
        guard list.isEmpty else { throw error }
        return Ladder(streamGuid: topGuid, variants: variants, publisherCredentials: credentials)
    }
}
