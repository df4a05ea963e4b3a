// swift-tools-version:6.1
import PackageDescription

// The suite builds with `--disable-index-store` (`./abr test`): SwiftPM otherwise indexes every
// module of this package while compiling it, and nothing in the suite reads that index but test
// discovery, which needs the test targets' units alone. So those targets write them, at the path
// SwiftPM reads (the flag SwiftPM passes itself when indexing is on, so a plain `swift test` works too).
#if arch(x86_64)
let hostTriple = "x86_64-unknown-linux-gnu"
#else
let hostTriple = "aarch64-unknown-linux-gnu"
#endif
/// Coverage for libFuzzer on this package's Swift modules when the Fuzzing trait is on (see `traits`).
let fuzzable: [SwiftSetting] = [.unsafeFlags(["-sanitize=fuzzer"], .when(traits: ["Fuzzing"])), .define("FUZZING", .when(traits: ["Fuzzing"]))]
let testsWriteTheIndex: [SwiftSetting] = [
    .unsafeFlags(["-index-store-path", Context.packageDirectory + "/.build/\(hostTriple)/debug/index/store"], .when(configuration: .debug)),
]

// Module layout (see README "Architecture"): only FFmpegBridge imports CFFmpeg;
// MediaCore is pure Swift; Transcoder builds the ladder engine on both.
let package = Package(
    name: "abr-worker",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "abr-worker", targets: ["abr-worker"]),
        .executable(name: "abr-fuzz", targets: ["abr-fuzz"]),
    ],
    // `./abr test`'s short libFuzzer run builds abr-fuzz in the suite's own folder with this trait:
    // coverage instrumentation on this package's Swift modules alone. Passed as `-Xswiftc` flags
    // it reached every module of the graph too (swift-nio, Hummingbird, GRDB, …), whose recompiling
    // held the suite's last phase back; the parsers under test are all here.
    traits: [.trait(name: "Fuzzing", description: "libFuzzer instrumentation and entry point (abr-fuzz)")],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        // Without its default ConfigurationSupport trait: the node reads no swift-configuration
        // providers, and that is one package fewer to build from source.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.0", traits: ["FullFoundation"]),
        // Authentication as route-group middleware (the admin API's bearer tokens, SM 1.0's accessToken).
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // HTTP/2 for HTTPS (Hummingbird resolves both already; the node wires them to its own TLS).
        .package(url: "https://github.com/apple/swift-nio-http2", from: "1.34.0"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.27.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        // Deque for every FIFO (swift-nio resolves it already), and base64 for SDP.
        .package(url: "https://github.com/apple/swift-collections", from: "1.1.0"),
        .package(url: "https://github.com/swift-extras/swift-extras-base64", from: "1.0.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CFFmpeg",
            pkgConfig: "libavcodec",
            providers: [.apt(["libavcodec-dev", "libavformat-dev", "libswscale-dev", "libswresample-dev", "libavutil-dev", "libx264-dev"])]
        ),
        .target(name: "MediaCore", dependencies: [.product(name: "DequeModule", package: "swift-collections")], swiftSettings: fuzzable),
        // Rate–quality analysis of ladders, pure Swift: convex hull, BD-rate, a suggested ladder,
        // the HTML/SVG report `abr-worker ladder` writes, and the quality timeline `transcode --quality` writes.
        .target(name: "LadderQuality", dependencies: ["MediaCore"], swiftSettings: fuzzable),
        // Child processes (the demo's loop publisher, the tests' peers) started so they can be signalled.
        .target(name: "ChildProcess"),
        // glibc allocator tuning (malloc.h) for the long-running node.
        .target(name: "CAllocator"),
        // The ladder's bicubic for 8-bit planes, in C with AVX2 and AVX-512 kernels chosen at run
        // time. Optimized in every configuration: the debug build's tests run live ladders on it.
        .target(name: "CPlaneScaler", cSettings: [.unsafeFlags(["-O2"])]),
        // OpenSSL's libcrypto (libssl-dev, which the DTLS shim needs anyway) for digests and HMACs:
        // swift-crypto would build a second copy of BoringSSL from source on every fresh clone.
        .systemLibrary(name: "COpenSSLCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        // HMAC-SHA256/SHA1, MD5, PBKDF2 and constant-time comparison, on COpenSSLCrypto.
        .target(name: "Digests", dependencies: ["COpenSSLCrypto"]),
        // RTSP/SDP/RTP as pure codecs and state machines: NIOCore's ByteBuffer, no sockets.
        .target(
            name: "RTSP",
            dependencies: ["MediaCore", .product(name: "NIOCore", package: "swift-nio"), "Digests",
                           .product(name: "ExtrasBase64", package: "swift-extras-base64")],
            swiftSettings: fuzzable
        ),
        // The publish contract every ingest protocol shares: the node's policy, one publisher
        // slot per stream, connection quotas, credentials and in-band picture checks, refusal logs.
        .target(name: "Ingest", dependencies: ["MediaCore", .product(name: "Logging", package: "swift-log"),
                                              .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                                              .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")], swiftSettings: fuzzable),
        .target(
            name: "RTSPServer",
            dependencies: [
                "RTSP", "MediaCore", "AccessTokens", "Ingest",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: fuzzable
        ),
        // OpenSSL's TLS for TCP behind a small C shim (bytes in memory, never a socket), and the
        // SwiftNIO handler on it: HTTPS (ALPN for HTTP/2) and the PostgreSQL client's TLS. In place
        // of swift-nio-ssl, whose BoringSSL copy was the largest part of every fresh build.
        .target(name: "CTLS", linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]),
        .target(name: "TLSTransport", dependencies: ["CTLS", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOTLS", package: "swift-nio")]),
        // OpenSSL's DTLS behind a small C shim (datagrams in memory, never a socket), and libsrtp2.
        // Also OpenSSL's AES-GCM, AES-ICM and HMAC-SHA1 for libsrtp2's crypto kernel, in place of Debian's NSS ones.
        .target(name: "CDTLS", linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto"), .linkedLibrary("srtp2")]),
        .systemLibrary(name: "CSRTP", pkgConfig: "libsrtp2", providers: [.apt(["libsrtp2-dev"])]),
        // The only importer of CDTLS and CSRTP: a viewer's DTLS association and its SRTP.
        .target(name: "WebRTCTransport", dependencies: ["CDTLS", "CSRTP"]),
        // WHEP playback: the UDP port, its viewers (ICE-lite, DTLS, SRTP) as players of the ladder.
        .target(
            name: "WebRTCServer",
            dependencies: [
                "WebRTC", "WebRTCTransport", "RTSPServer", "Ingest", "RTSP", "MediaCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // WebRTC's wire formats (STUN and ICE-lite so far): pure, no sockets, fuzzed like the others.
        .target(name: "WebRTC", dependencies: ["RTSP", "MediaCore", .product(name: "NIOCore", package: "swift-nio"), "Digests", .product(name: "DequeModule", package: "swift-collections")], swiftSettings: fuzzable),
        // Tokens that grant access, pure, on OpenSSL's HMAC-SHA256 (Digests): the API's bearer JWTs (who may
        // call it) and signed playback (who may watch); fuzzed like the other parsers.
        .target(name: "AccessTokens", dependencies: ["MediaCore", "Digests"], swiftSettings: fuzzable),
        // RTMP as pure codecs and a session value: handshake, chunks, AMF0, FLV media. No sockets.
        .target(
            name: "RTMP",
            dependencies: ["MediaCore", .product(name: "NIOCore", package: "swift-nio"), "Digests"],
            swiftSettings: fuzzable
        ),
        // The RTMP ingest listener: publishers into the same policy and registry as RTSP's.
        .target(
            name: "RTMPServer",
            dependencies: [
                "RTMP", "Ingest", "MediaCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // libsrt (Debian's libsrt-gnutls-dev: the flavour Debian's libavformat links, so the process holds
        // one libsrt), imported only by SRTServer, as CFFmpeg is by FFmpegBridge.
        .systemLibrary(name: "CSRT", pkgConfig: "srt", providers: [.apt(["libsrt-gnutls-dev"])]),
        // The SRT listener: MPEG-TS publishers, demuxed by libavformat from memory, into the same policy as RTSP's.
        .target(
            name: "SRTServer",
            dependencies: [
                "CSRT", "FFmpegBridge", "Ingest", "MediaCore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // Provisions → live jobs → republished streams: the node's live behaviour.
        .target(
            name: "LiveNode",
            dependencies: [
                "RTSPServer", "Ingest", "RTSP", "Transcoder", "MediaCore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // What a node keeps and a fleet shares: provisions, job history, node registry, placement.
        // SQLite (GRDB) for one node, PostgreSQL for a fleet (the protocol's core spoken on swift-nio,
        // TLS by TLSTransport for `sslmode`, SCRAM's digests by Digests).
        .target(
            name: "Store",
            dependencies: [
                "Ingest", "MediaCore", "Digests", "TLSTransport",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The HTTP API a stream manager calls, its authentication, node requests and the fleet.
        .target(
            name: "ControlPlane",
            dependencies: [
                "LiveNode", "RTSPServer", "Ingest", "RTSP", "Transcoder", "MediaCore", "Store", "AccessTokens", "WebRTCServer",
                .product(name: "Hummingbird", package: "hummingbird"),
                // HTTPS with HTTP/2 (Low-Latency HLS players ask for it) when the node has a certificate.
                .product(name: "HummingbirdCore", package: "hummingbird"),
                "TLSTransport",
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHTTPTypesHTTP2", package: "swift-nio-extras"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "HummingbirdAuth", package: "hummingbird-auth"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "FFmpegBridge",
            dependencies: ["CFFmpeg", "CPlaneScaler", "MediaCore", .product(name: "DequeModule", package: "swift-collections")],
            swiftSettings: fuzzable
        ),
        .target(
            name: "Transcoder",
            dependencies: [
                "FFmpegBridge", "MediaCore", "LadderQuality",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            swiftSettings: fuzzable
        ),
        // The node `serve` runs, built as a library (`buildApplication`): the command only parses
        // arguments, and tests run the same node in-process.
        .target(
            name: "NodeApp",
            dependencies: [
                "Transcoder", "MediaCore", "RTSPServer", "Ingest", "RTMPServer", "SRTServer", "WebRTCServer", "LiveNode", "ControlPlane", "Store", "CAllocator", "ChildProcess",
                "TLSTransport",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "abr-worker",
            dependencies: [
                "NodeApp", "Transcoder", "MediaCore", "FFmpegBridge", "ControlPlane", "LadderQuality",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        // Every network- and API-facing parser as a fuzz entry point; `abr-fuzz` runs them under
        // libFuzzer (`./abr fuzz`), the tests replay the corpus and mutations through them.
        .target(
            name: "FuzzTargets",
            dependencies: [
                "RTSP", "RTMP", "RTSPServer", "Ingest", "Transcoder", "MediaCore", "WebRTC", "AccessTokens", "Store",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            swiftSettings: fuzzable
        ),
        .executableTarget(name: "abr-fuzz", dependencies: ["FuzzTargets"], swiftSettings: fuzzable, linkerSettings: [.unsafeFlags(["-sanitize=fuzzer"], .when(traits: ["Fuzzing"]))]),
        .testTarget(name: "MediaCoreTests", dependencies: ["MediaCore", "TestSupport"], swiftSettings: testsWriteTheIndex),
        .testTarget(name: "LadderQualityTests", dependencies: ["LadderQuality"], swiftSettings: testsWriteTheIndex),
        .testTarget(name: "WebRTCTests", dependencies: ["WebRTC", "WebRTCTransport", "WebRTCServer", "RTSPServer", "Ingest", "RTSP", "MediaCore",
                                                    .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio")], swiftSettings: testsWriteTheIndex),
        .testTarget(name: "RTMPTests", dependencies: ["RTMP", "MediaCore", .product(name: "NIOCore", package: "swift-nio"),
                                                    "Digests"], swiftSettings: testsWriteTheIndex),
        .testTarget(
            name: "RTSPTests",
            dependencies: ["RTSP", "MediaCore", .product(name: "NIOCore", package: "swift-nio"),
                           .product(name: "ExtrasBase64", package: "swift-extras-base64")], swiftSettings: testsWriteTheIndex),
        // Helpers shared by the test targets: running real peers, probing media, reading playlists.
        .target(name: "TestSupport", dependencies: ["ChildProcess"], path: "Tests/TestSupport"),
        .testTarget(
            name: "TranscoderTests",
            dependencies: ["Transcoder", "MediaCore", "FFmpegBridge", "CPlaneScaler", "LadderQuality", "abr-worker", "TestSupport"], swiftSettings: testsWriteTheIndex),
        .testTarget(
            name: "RTSPServerTests",
            dependencies: ["RTSPServer", "Ingest", "RTSP", "MediaCore", "Transcoder", "LiveNode", "TestSupport", "RTMP", "RTMPServer",
                           .product(name: "NIOCore", package: "swift-nio"),
                           .product(name: "NIOEmbedded", package: "swift-nio"),
                           .product(name: "NIOPosix", package: "swift-nio"),
                           .product(name: "Logging", package: "swift-log")], swiftSettings: testsWriteTheIndex),
        .testTarget(name: "FuzzTargetsTests", dependencies: ["FuzzTargets", "RTSP", "MediaCore", "AccessTokens", "Digests",
                                                          .product(name: "NIOCore", package: "swift-nio")], swiftSettings: testsWriteTheIndex),
        .testTarget(
            name: "ControlPlaneTests",
            dependencies: ["ControlPlane", "Store", "LiveNode", "MediaCore", "TestSupport", "Transcoder", "NodeApp", "AccessTokens", "Ingest",
                           .product(name: "Hummingbird", package: "hummingbird"),
                           .product(name: "NIOEmbedded", package: "swift-nio"),
                           .product(name: "NIOHTTP1", package: "swift-nio"),
                           .product(name: "NIOPosix", package: "swift-nio"),
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                           "TLSTransport",
                           "Digests"], swiftSettings: testsWriteTheIndex),
    ],
    swiftLanguageModes: [.v6]
)
