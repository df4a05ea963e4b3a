import Foundation
import MediaCore
import Testing

/// The repository's `Fixtures/` folder, found from this file so tests run from any directory.
let fixturesDirectory = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("Fixtures")

func provisionFixture(_ name: String) throws -> Data {
    try Data(contentsOf: fixturesDirectory.appendingPathComponent("provisions/\(name)"))
}

@Suite struct ProvisionParserTests {
    @Test func readsStreamManager2ArrayWithIgnoredFields() throws {
        let ladder = try ProvisionParser.parse(try provisionFixture("sm2-3-level.json"))
        #expect(ladder.streamGuid == "live/stream1")
        #expect(ladder.name == "stream1")
        #expect(ladder.variants == [
            Variant(streamGuid: "live/stream1_1", level: 1, width: 1280, height: 720, bitRate: 2_500_000),
            Variant(streamGuid: "live/stream1_2", level: 2, width: 854, height: 480, bitRate: 1_000_000),
            Variant(streamGuid: "live/stream1_3", level: 3, width: 640, height: 360, bitRate: 600_000),
        ])
    }

    @Test func readsProvisionGuidObjectAndSortsLevels() throws {
        let ladder = try ProvisionParser.parse(try provisionFixture("sm2-4-level.json"))
        #expect(ladder.streamGuid == "live/room1/show")
        #expect(ladder.name == "show")
        #expect(ladder.variants.map(\.level) == [1, 2, 3, 4])
        #expect(ladder.variants.map(\.streamGuid) == (1...4).map { "live/room1/show_\($0)" })
    }

    @Test func readsStreamManager1MetaWithDefaultAndGivenGuid() throws {
        let data = try provisionFixture("sm1-meta.json")
        let ladder = try ProvisionParser.parse(data)
        #expect(ladder.streamGuid == "live/stream1")
        #expect(ladder.variants.map(\.streamGuid) == ["live/stream1_1", "live/stream1_2", "live/stream1_3"])
        #expect(ladder.variants[1].bitRate == 1_000_000)

        let scoped = try ProvisionParser.parse(data, streamGuid: "event/room9/stream1")
        #expect(scoped.variants.map(\.streamGuid) == ["event/room9/stream1_1", "event/room9/stream1_2", "event/room9/stream1_3"])
    }

    @Test func acceptsIntegralDoublesButNotFractions() throws {
        let text = #"{"streamGuid":"live/a","streams":[{"streamGuid":"live/a_1","abrLevel":1.0,"videoParams":{"videoBitRate":1e6,"videoWidth":640,"videoHeight":360}}]}"#
        let ladder = try ProvisionParser.parse(Array(text.utf8))
        #expect(ladder.top.bitRate == 1_000_000)
    }

    /// Every invalid fixture, the JSON path its message must name, and a fragment of the message.
    static let invalidExpectations: [String: (path: String, message: String)] = [
        "bitrate-missing.json": ("provision.streams[0].videoParams.videoBitRate", "missing"),
        "bitrate-not-decreasing.json": ("provision.streams[1].videoParams.videoBitRate", "must be lower than level 1's 2500000 (got 2500000)"),
        "bitrate-too-high.json": ("provision.streams[0].videoParams.videoBitRate", "(got 80000000)"),
        "bitrate-too-low.json": ("provision.streams[1].videoParams.videoBitRate", "(got 16000)"),
        "bitrate-wrong-type.json": ("provision.streams[0].videoParams.videoBitRate", "expected an integer (got \"2500k\")"),
        "guid-mismatch.json": ("provision.streams[1].streamGuid", "must be \"live/stream1_2\" for level 2 (got \"live/other_2\")"),
        "height-odd.json": ("provision.streams[1].videoParams.videoHeight", "must be even (got 481)"),
        "level-duplicate.json": ("provision.streams[2].abrLevel", "duplicates level 2"),
        "level-gap.json": ("provision.streams[1].abrLevel", "level 2 is missing (got 3)"),
        "level-not-integer.json": ("provision.streams[1].abrLevel", "expected an integer (got 2.5)"),
        "level-zero.json": ("provision.streams[0].abrLevel", "must be 1 or more (got 0)"),
        "no-variants.json": ("provision.streams", "must hold 1 to 10 variants (got 0)"),
        "not-a-provision.json": ("provision", "expected a provision object or an array holding one"),
        "not-json.json": ("provision", "not valid JSON at line 2, column 1"),
        "size-increasing.json": ("provision.streams[1].videoParams.videoWidth", "must not exceed level 1's 1280 (got 1920)"),
        "size-too-large.json": ("provision.streams[0].videoParams.videoWidth", "(got 8192)"),
        "size-too-small.json": ("provision.streams[1].videoParams.videoHeight", "(got 8)"),
        "sm1-missing-height.json": ("meta.stream[1].properties.videoHeight", "missing"),
        "streams-not-array.json": ("provision.streams", "expected an array (got an object"),
        "too-many-variants.json": ("provision.streams", "must hold 1 to 10 variants (got 11)"),
        "top-guid-missing.json": ("provision.streamGuid", "missing"),
        "top-guid-no-scope.json": ("provision.streamGuid", "at least one '/'"),
        "two-provisions.json": ("provision", "exactly one provision (got 2)"),
        "width-odd.json": ("provision.streams[1].videoParams.videoWidth", "must be even (got 853)"),
    ]

    @Test func everyInvalidFixtureHasAnExpectation() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: fixturesDirectory.appendingPathComponent("provisions/invalid").path)
        #expect(Set(files.filter { $0.hasSuffix(".json") }) == Set(Self.invalidExpectations.keys))
    }

    @Test(arguments: invalidExpectations.keys.sorted())
    func invalidFixtureIsRejectedWithPathAndValue(_ file: String) throws {
        let expected = try #require(Self.invalidExpectations[file])
        let error = try #require(throws: ProvisionError.self) {
            try ProvisionParser.parse(try provisionFixture("invalid/\(file)"))
        }
        #expect(error.problems.contains { $0.path == expected.path && $0.message.contains(expected.message) },
                "got: \(error.problems)")
    }

    /// `"playback"` carries the viewer-facing flags: signed tokens, and rungs WebRTC can carry.
    @Test func readsThePlaybackFlagsAndNamesAWrongOne() throws {
        func ladder(_ playback: String) throws -> Ladder {
            try ProvisionParser.parse(Array(#"{"streamGuid":"live/s","playback":\#(playback),"streams":[{"streamGuid":"live/s_1","abrLevel":1,"videoParams":{"videoBitRate":1000000,"videoWidth":1280,"videoHeight":720}}]}"#.utf8))
        }
        let both = try ladder(#"{"signed":true,"webrtcSafe":true}"#)
        #expect(both.requiresSignedPlayback && both.webRTCSafe)
        let neither = try ladder("{}")
        #expect(!neither.requiresSignedPlayback && !neither.webRTCSafe)
        let error = try #require(throws: ProvisionError.self) { try ladder(#"{"webrtcSafe":"yes"}"#) }
        #expect(error.problems.contains { $0.path == "provision.playback.webrtcSafe" && $0.message.contains("expected true or false") }, "\(error.problems)")
    }

    @Test func reportsEveryProblemNotJustTheFirst() throws {
        let text = #"{"streamGuid":"live/s","streams":[{"streamGuid":"live/s_1","abrLevel":1,"videoParams":{"videoBitRate":10,"videoWidth":15,"videoHeight":5000}}]}"#
        let error = try #require(throws: ProvisionError.self) { try ProvisionParser.parse(Array(text.utf8)) }
        #expect(Set(error.problems.map(\.path)) == [
            "provision.streams[0].videoParams.videoBitRate",
            "provision.streams[0].videoParams.videoWidth",
            "provision.streams[0].videoParams.videoHeight",
        ])
    }

    @Test(arguments: ["", "[]", "null", "{", "[{}]", #"{"meta":[]}"#, #"{"streamGuid":"live/../x","streams":[]}"#,
                      #"{"streamGuid":"live/a b","streams":[1]}"#, String(repeating: "[", count: 10_000)])
    func hostileInputGivesAnErrorNotACrash(_ text: String) {
        #expect(throws: ProvisionError.self) { try ProvisionParser.parse(Array(text.utf8)) }
    }
}

@Suite struct JSONReaderTests {
    /// OvenMediaEngine and Wowza let each rendition choose its encoder preset and profile; a
    /// provision may too, per rung, and anything else is refused with its path.
    @Test func perRungPresetAndProfileAreOptionalAndChecked() throws {
        func provision(_ extra: String) -> String {
            #"""
            {"streamGuid": "live/s", "streams": [
              {"streamGuid": "live/s_1", "abrLevel": 1, "videoParams": {"videoBitRate": 2000000, "videoWidth": 1280, "videoHeight": 720}},
              {"streamGuid": "live/s_2", "abrLevel": 2, "videoParams": {"videoBitRate": 500000, "videoWidth": 640, "videoHeight": 360\#(extra)}}]}
            """#
        }
        let ladder = try ProvisionParser.parse(Array(provision(#", "preset": "fast", "profile": "baseline""#).utf8))
        #expect(ladder.variants[0].preset == nil && ladder.variants[0].profile == nil)
        #expect(ladder.variants[1].preset == "fast" && ladder.variants[1].profile == "baseline")
        #expect(try ProvisionParser.parse(Array(provision(#", "preset": null"#).utf8)).variants[1].preset == nil)
        for (extra, path, message) in [
            (#", "preset": "turbo""#, "provision.streams[1].videoParams.preset", #"must be an x264 preset: ultrafast, superfast, veryfast, faster, fast, medium, slow, slower, veryslow, placebo (got "turbo")"#),
            (#", "profile": "high10""#, "provision.streams[1].videoParams.profile", #"must be an H.264 profile: baseline, main, high (got "high10")"#),
            (#", "profile": 66"#, "provision.streams[1].videoParams.profile", "expected a string (got 66)"),
        ] {
            #expect(throws: ProvisionError.self) { try ProvisionParser.parse(Array(provision(extra).utf8)) }
            do {
                _ = try ProvisionParser.parse(Array(provision(extra).utf8))
            } catch {
                #expect(error.problems.contains { $0.path == path && $0.message == message }, "\(error.problems)")
            }
        }
    }

    @Test func keepsTypesApart() throws {
        let value = try JSONReader.parse(#"{"a":1,"b":1.5,"c":true,"d":"x\u00e9\ud83d\ude00","e":[null]}"#)
        #expect(value["a"] == .integer(1))
        #expect(value["b"] == .number(1.5))
        #expect(value["c"] == .bool(true))
        #expect(value["d"] == .string("xé😀"))
        #expect(value["e"] == .array([.null]))
    }

    @Test func writesBackWhatItRead() throws {
        let text = #"{"b":[1,2.5,true,null],"a":"q\"\\\n\u0001é😀","c":{}}"#
        let value = try JSONReader.parse(text)
        #expect(value.jsonText == text)
        #expect(try JSONReader.parse(value.jsonText) == value)
    }

    @Test func locatesSyntaxErrors() {
        let error = #expect(throws: JSONSyntaxError.self) { try JSONReader.parse("{\n  \"a\": 1,\n  \"b\" 2\n}") }
        #expect(error?.line == 3)
        #expect(error?.column == 7)
    }

    @Test func limitsNesting() {
        #expect(throws: JSONSyntaxError.self) { try JSONReader.parse(String(repeating: "[", count: 65) + String(repeating: "]", count: 65)) }
        #expect((try? JSONReader.parse(String(repeating: "[", count: 64) + String(repeating: "]", count: 64))) != nil)
    }
}

@Suite struct ProvisionCredentialsTests {
    static func sm2(_ credentials: String) -> String {
        """
        [{"streamGuid":"live/s","credentials":\(credentials),"streams":[{"streamGuid":"live/s_1","abrLevel":1,"videoParams":{"videoBitRate":1000000,"videoWidth":640,"videoHeight":360}}]}]
        """
    }

    @Test func sm2CredentialsBecomeTheLaddersPublisherCredentials() throws {
        let ladder = try ProvisionParser.parse(Array(Self.sm2(#"{"username":"cam","password":"secret"}"#).utf8))
        #expect(ladder.publisherCredentials == StreamCredentials(username: "cam", password: "secret"))
        #expect("\(ladder.publisherCredentials!)" == "cam:***", "a password is never printed")
    }

    @Test(arguments: [#"null"#, #"{}"#, #"{"username":"","password":""}"#])
    func absentOrEmptyCredentialsMeanAnOpenStream(_ credentials: String) throws {
        #expect(try ProvisionParser.parse(Array(Self.sm2(credentials).utf8)).publisherCredentials == nil)
    }

    @Test(arguments: [(#""user:pass""#, "credentials", "expected an object"), (#"{"username":"a:b","password":"x"}"#, "credentials.username", "':'"),
                      (#"{"username":"","password":"x"}"#, "credentials.username", "must not be empty"),
                      (#"{"username":5,"password":"x"}"#, "credentials.username", "expected a string"),
                      (#"{"username":"a","password":"x\"y"}"#, "credentials.password", "control characters")])
    func badCredentialsAreErrorsWithTheirPath(_ credentials: String, _ path: String, _ words: String) {
        do {
            _ = try ProvisionParser.parse(Array(Self.sm2(credentials).utf8))
            Issue.record("accepted \(credentials)")
        } catch {
            #expect(error.problems.contains { $0.path == "provision[0].\(path)" && $0.message.contains(words) }, "\(error)")
        }
    }

    @Test func sm1AuthenticationIsReadToo() throws {
        let document = #"{"meta":{"authentication":{"username":"cam","password":"pw"},"stream":[{"name":"s_1","level":1,"properties":{"videoBR":1000000,"videoWidth":640,"videoHeight":360}}]}}"#
        #expect(try ProvisionParser.parse(Array(document.utf8)).publisherCredentials?.username == "cam")
        // The bundled SM 1.0 document's empty strings mean no authentication.
        #expect(try ProvisionParser.parse(try provisionFixture("sm1-meta.json")).publisherCredentials == nil)
    }
}
