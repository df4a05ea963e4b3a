import CSRT
import Foundation
import Ingest
import Logging
import MediaCore
import NIOPosix
import Synchronization

/// The node's SRT listener (Debian's libsrt), for publishers that push MPEG-TS: a broadcaster's
/// encoder, `ffmpeg -f mpegts srt://…`, GStreamer's `srtsink`. Only this module imports libsrt.
///
/// A publisher names its stream in the SRT stream ID (`#!::r=live/stream1_1,m=publish,u=user,p=…`,
/// `publish:live/stream1_1:user:pass`, or `live/stream1_1?user=…&password=…`). It is admitted or
/// refused during the handshake, in libsrt's listen callback, with an SRT reject reason the
/// client reports (1401 unauthorized, 1404 not found, 1409 conflict, 1503 overloaded...): the
/// same `PublishPolicy` and publisher claims as RTSP and RTMP decide. Every connection is read
/// through one epoll thread; each publisher's MPEG-TS is demuxed by libavformat (through
/// FFmpegBridge, reading from memory) on a thread of its own, into its sink.
public final class SRTService: @unchecked Sendable {
    // @unchecked: `state` is a Mutex; `listener`, `epoll` and `loop` are set before the loop
    // thread starts and read-only after, until `shutdown` (which joins that thread first).
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        public var port = 8890
        /// SRT's receive latency (ms): how long it may wait for a retransmission.
        public var latencyMilliseconds = 120
        /// When set, publishers must encrypt with it (SRTO_PASSPHRASE, 10 to 79 characters).
        public var passphrase: String?
        /// Publishers at once, and from one IP address.
        public var maximumConnections = 64
        public var maximumConnectionsPerAddress = 16
        /// Seconds a publisher must have been silent before a new connection that passes the same
        /// authentication may take its stream over.
        public var publisherTakeoverSilence = 5.0
        /// The largest picture a publisher may send (its SPS), as for RTSP and RTMP.
        public var maximumPublishPixels = PublishAdmission.defaultMaximumPixels
        /// What its timeouts and silences are measured on.
        public var clock = NodeClock.system
        public init() {}
    }

    public enum StartError: Error, CustomStringConvertible {
        case libsrt(String)
        public var description: String {
            switch self {
            case let .libsrt(message): message
            }
        }
    }

    public let configuration: Configuration
    /// The node's publisher slots: one publisher per stream, whatever its protocol.
    let slots: PublisherSlots
    /// Credentials, the node's policy and the publisher slot, as every protocol admits a publish.
    let gate: PublishGate
    let logger: Logger
    /// Refused handshakes: one log line a second at most.
    let refusals = RefusalLog()
    private var listener: SRTSOCKET = SRT_INVALID_SOCK
    private var epoll: Int32 = -1
    private var loop: Thread?
    private let running = Atomic<Bool>(false)
    private let loopDone = DispatchSemaphore(value: 0)
    private let state = Mutex<State>(State())

    struct State {
        /// Admitted in the handshake, not yet accepted: the stream is claimed once the connection is.
        var pending: [SRTSOCKET: Admission] = [:]
        var publishers: [SRTSOCKET: SRTPublisher] = [:]
        var byAddress: [String: Int] = [:]
        var boundPort: Int?
    }

    struct Admission {
        var target: PublishTarget
        var sink: any MediaSink
        var address: String
        var claim: String
        var lastMedia: PublisherActivity
        var admitted: Double
    }

    public init(configuration: Configuration, publishers: PublisherSlots, policy: any PublishPolicy, logger: Logger = Logger(label: "abr.srt")) {
        self.configuration = configuration
        self.slots = publishers
        gate = PublishGate(policy: policy, slots: publishers, takeoverSilence: configuration.publisherTakeoverSilence)
        self.logger = logger
    }

    /// The bound port (after `start`).
    public var port: Int? { state.withLock { $0.boundPort } }
    public var connectionCount: Int { state.withLock { $0.publishers.count + $0.pending.count } }

    /// Binds the listener and starts its thread; returns the port.
    @discardableResult
    public func start() throws -> Int {
        srt_startup()
        // libsrt logs handshake refusals itself; the node logs what it decided.
        srt_setloglevel(2)
        listener = srt_create_socket()
        guard listener != SRT_INVALID_SOCK else { throw StartError.libsrt("cannot create an SRT socket: \(Self.lastError)") }
        var no: Int32 = 0
        var latency = Int32(configuration.latencyMilliseconds)
        srt_setsockflag(listener, SRTO_RCVSYN, &no, Int32(MemoryLayout<Int32>.size))
        srt_setsockflag(listener, SRTO_LATENCY, &latency, Int32(MemoryLayout<Int32>.size))
        if let passphrase = configuration.passphrase {
            let bytes = Array(passphrase.utf8)
            guard (10...79).contains(bytes.count) else { throw StartError.libsrt("an SRT passphrase must have 10 to 79 characters (got \(bytes.count))") }
            _ = bytes.withUnsafeBytes { srt_setsockflag(listener, SRTO_PASSPHRASE, $0.baseAddress, Int32($0.count)) }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(configuration.port).bigEndian)
        guard inet_pton(AF_INET, configuration.host, &address.sin_addr) == 1 else {
            throw StartError.libsrt("SRT listens on an IPv4 address (got \(configuration.host))")
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { srt_bind(listener, $0, Int32(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound != SRT_ERROR else { throw StartError.libsrt("cannot bind SRT to \(configuration.host):\(configuration.port): \(Self.lastError)") }
        guard srt_listen(listener, 64) != SRT_ERROR else { throw StartError.libsrt("cannot listen for SRT: \(Self.lastError)") }
        srt_listen_callback(listener, { opaque, socket, _, peer, streamID in
            guard let opaque else { return -1 }
            let service = Unmanaged<SRTService>.fromOpaque(opaque).takeUnretainedValue()
            return service.admit(socket: socket, peer: peer, streamID: streamID.map { String(cString: $0) } ?? "")
        }, Unmanaged.passUnretained(self).toOpaque())
        epoll = srt_epoll_create()
        var events = Int32(SRT_EPOLL_IN.rawValue | SRT_EPOLL_ERR.rawValue)
        srt_epoll_add_usock(epoll, listener, &events)
        var local = sockaddr_in()
        var length = Int32(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { srt_getsockname(listener, $0, &length) } }
        let port = Int(UInt16(bigEndian: local.sin_port))
        state.withLock { $0.boundPort = port }
        running.store(true, ordering: .relaxed)
        let thread = Thread { [self] in
            receiveLoop()
            loopDone.signal()
        }
        thread.name = "srt-receive"
        loop = thread
        thread.start()
        logger.info("SRT listening", metadata: ["srt.port": "\(port)", "srt.latency.ms": "\(configuration.latencyMilliseconds)",
                                                 "srt.encrypted": "\(configuration.passphrase != nil)"])
        return port
    }

    static var lastError: String { String(cString: srt_getlasterror_str()) }

    // MARK: Admission (libsrt's handshake thread)

    /// Decides a connection in its handshake: 0 admits it, -1 refuses with the reason set on it.
    private func admit(socket: SRTSOCKET, peer: UnsafePointer<sockaddr>?, streamID: String) -> Int32 {
        let address = Self.describe(peer)
        func refuse(_ code: Int32, _ reason: String) -> Int32 {
            // Handshakes cost a peer nothing: their refusals are logged a line a second at most.
            refusals.log(logger, "SRT publish refused", kind: "\(code)", metadata: ["srt.peer": "\(address.full)", "srt.streamid": "\(Self.printable(streamID))",
                                                                   "reason": "\(reason)", "srt.reject": "\(code)"], level: .info)
            srt_setrejectreason(socket, code)
            return -1
        }
        let target: PublishTarget
        do {
            target = try PublishTarget(srtStreamID: streamID)
        } catch {
            return refuse(Int32(SRT_REJX_BAD_REQUEST), error.description)
        }
        guard target.isPublish else { return refuse(Int32(SRT_REJX_BAD_MODE), "this node takes publishers over SRT; play over RTSP or HLS") }
        let crowded: String? = state.withLock { state in
            if state.pending.count + state.publishers.count >= configuration.maximumConnections { return "too many SRT publishers" }
            if state.byAddress[address.ip, default: 0] >= configuration.maximumConnectionsPerAddress { return "too many SRT publishers from \(address.ip)" }
            return nil
        }
        if let crowded { return refuse(Int32(SRT_REJX_OVERLOAD), crowded) }
        // The claim waits for the connection: a handshake may still fail after this (a wrong
        // passphrase is found later), and a failed one must not hold the stream meanwhile.
        let request = PublishRequest(path: target.path, remoteAddress: address.full, transport: Self.ingestProtocol.scheme, sps: nil)
        let sink: any MediaSink
        switch gate.admit(request, credentials: .presented(user: target.username, password: target.password), claim: nil) {
        case .refused(.credentials):
            return refuse(Int32(SRT_REJX_UNAUTHORIZED), "authentication failed: \(target.path) needs the provision's credentials")
        case let .refused(.policy(status, reason)):
            let code: Int32 = switch status {
            case 404: Int32(SRT_REJX_NOTFOUND)
            case 403: Int32(SRT_REJX_FORBIDDEN)
            case 415: Int32(SRT_REJX_UNACCEPTABLE)
            default: Int32(SRT_REJX_OVERLOAD)
            }
            return refuse(code, reason)
        case .refused(.alreadyPublished):
            return refuse(Int32(SRT_REJX_CONFLICT), "\(target.path) already has a publisher")
        case let .admitted(accepted, _):
            sink = accepted
        }
        let claim = "srt-\(socket)"
        let activity = PublisherActivity(clock: configuration.clock)
        state.withLock { state in
            state.pending[socket] = Admission(target: target, sink: sink, address: address.full, claim: claim, lastMedia: activity,
                                              admitted: now)
            state.byAddress[address.ip, default: 0] += 1
        }
        return 0
    }

    var now: Double { configuration.clock.seconds }

    // MARK: The receive loop (its own thread)

    private func receiveLoop() {
        var events = [SRT_EPOLL_EVENT](repeating: SRT_EPOLL_EVENT(fd: 0, events: 0), count: 64)
        var buffer = [UInt8](repeating: 0, count: 1500)
        var lastSweep = now
        while running.load(ordering: .relaxed) {
            let count = srt_epoll_uwait(epoll, &events, Int32(events.count), 200)
            if count > 0 {
                for event in events.prefix(Int(count)) {
                    if event.fd == listener {
                        acceptAll()
                    } else {
                        receive(from: event.fd, failed: event.events & Int32(SRT_EPOLL_ERR.rawValue) != 0, buffer: &buffer)
                    }
                }
            }
            if now - lastSweep > 1 {
                lastSweep = now
                sweepPending()
            }
        }
    }

    private func acceptAll() {
        while true {
            var peer = sockaddr_storage()
            var length = Int32(MemoryLayout<sockaddr_storage>.size)
            let socket = withUnsafeMutablePointer(to: &peer) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { srt_accept(listener, $0, &length) } }
            guard socket != SRT_INVALID_SOCK else { return }
            guard let admission = state.withLock({ $0.pending.removeValue(forKey: socket) }) else {
                // Admitted long ago and swept, or never: nothing waits for it.
                srt_close(socket)
                continue
            }
            let path = admission.target.path
            let claim = PublishGate.Claim(session: admission.claim, revoke: { [weak self] reason in self?.revoke(socket, reason: reason) },
                                          silence: { admission.lastMedia.silence })
            guard let tookOver = gate.claim(claim, path: path) else {
                // Another publisher claimed the stream between this one's handshake and now.
                logger.info("SRT publish refused: \(path) already has a publisher", metadata: ["srt.peer": "\(admission.address)"])
                state.withLock { $0.release(address: admission.address) }
                srt_close(socket)
                continue
            }
            if tookOver { logger.info("publisher takes over a silent session", metadata: ["stream.guid": "\(path)"]) }
            var no: Int32 = 0
            srt_setsockflag(socket, SRTO_RCVSYN, &no, Int32(MemoryLayout<Int32>.size))
            var events = Int32(SRT_EPOLL_IN.rawValue | SRT_EPOLL_ERR.rawValue)
            srt_epoll_add_usock(epoll, socket, &events)
            let publisher = SRTPublisher(socket: socket, admission: admission, service: self)
            state.withLock { $0.publishers[socket] = publisher }
            logger.info("publisher started", metadata: ["stream.guid": "\(admission.target.path)", "protocol": "srt", "srt.peer": "\(admission.address)"])
            publisher.start()
        }
    }

    private func receive(from socket: SRTSOCKET, failed: Bool, buffer: inout [UInt8]) {
        guard let publisher = state.withLock({ $0.publishers[socket] }) else { return }
        while true {
            let received = buffer.withUnsafeMutableBufferPointer { pointer in
                pointer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: pointer.count) { srt_recvmsg(socket, $0, Int32(pointer.count)) }
            }
            if received > 0 {
                publisher.received(Array(buffer[..<Int(received)]))
                continue
            }
            // Nothing more for now, or the connection is gone.
            if received == SRT_ERROR, srt_getlasterror(nil) == Int32(SRT_EASYNCRCV.rawValue), !failed { return }
            close(socket, reason: failed ? "the connection broke" : "the publisher disconnected")
            return
        }
    }

    /// Admissions whose connection never completed (a failed passphrase, say) are forgotten.
    private func sweepPending() {
        let stale: [(SRTSOCKET, Admission)] = state.withLock { state in
            let old = state.pending.filter { now - $0.value.admitted > 5 }
            for (socket, _) in old { state.pending.removeValue(forKey: socket) }
            for (_, admission) in old { state.release(address: admission.address) }
            return Array(old)
        }
        for (_, admission) in stale { admission.sink.end(reason: "the SRT connection was never completed") }
    }

    /// Ends a publisher's connection (from the loop, or its demuxer when the stream is refused).
    func close(_ socket: SRTSOCKET, reason: String) {
        guard let publisher = state.withLock({ state -> SRTPublisher? in
            guard let publisher = state.publishers.removeValue(forKey: socket) else { return nil }
            state.release(address: publisher.admission.address)
            return publisher
        }) else { return }
        srt_epoll_remove_usock(epoll, socket)
        srt_close(socket)
        slots.releasePublisher(publisher.admission.target.path, session: publisher.admission.claim)
        publisher.stop(reason: reason)
    }

    private func revoke(_ socket: SRTSOCKET, reason: String) {
        logger.notice("publish revoked: \(reason)", metadata: ["srt.socket": "\(socket)"])
        if let admission = state.withLock({ $0.pending.removeValue(forKey: socket) }) {
            state.withLock { $0.release(address: admission.address) }
            admission.sink.end(reason: reason)
            return
        }
        close(socket, reason: reason)
    }

    public func shutdown() {
        guard running.exchange(false, ordering: .relaxed) else { return }
        if loop != nil { loopDone.wait() }
        let (publishers, pending) = state.withLock { state in
            defer {
                state.publishers = [:]
                state.pending = [:]
                state.byAddress = [:]
            }
            return (Array(state.publishers), Array(state.pending.values))
        }
        for (socket, publisher) in publishers {
            srt_close(socket)
            slots.releasePublisher(publisher.admission.target.path, session: publisher.admission.claim)
            publisher.stop(reason: "server shutting down")
        }
        for admission in pending { admission.sink.end(reason: "server shutting down") }
        srt_epoll_release(epoll)
        srt_close(listener)
        srt_cleanup()
    }

    static func describe(_ peer: UnsafePointer<sockaddr>?) -> (ip: String, full: String) {
        guard let peer, peer.pointee.sa_family == sa_family_t(AF_INET) else { return ("?", "?") }
        return peer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { address in
            var text = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
            var ip = address.pointee.sin_addr
            inet_ntop(AF_INET, &ip, &text, socklen_t(INET_ADDRSTRLEN))
            let host = String(cString: text)
            return (host, "\(host):\(UInt16(bigEndian: address.pointee.sin_port))")
        }
    }

    /// A peer's stream ID as it may appear in a log line.
    static func printable(_ text: String) -> String {
        String(text.unicodeScalars.prefix(128).map { $0.value >= 0x20 && $0.value < 0x7F ? Character($0) : "?" })
    }
}

extension SRTService.State {
    mutating func release(address full: String) {
        let ip = String(full.split(separator: ":").first ?? "?")
        let left = byAddress[ip, default: 1] - 1
        byAddress[ip] = left > 0 ? left : nil
    }
}

import ServiceLifecycle

extension SRTService: Service {
    public func run() async throws {
        if port == nil { try start() }
        try? await gracefulShutdown()
        // Shutting down joins the receive thread: on the process's thread pool for blocking work, not the cooperative pool.
        try? await NIOThreadPool.singleton.runIfActive { self.shutdown() }
    }
}

extension SRTService: IngestListener {
    public static let ingestProtocol = IngestProtocol(scheme: "srt", name: "SRT", urlTemplate: "srt://{host}:{port}?streamid=publish:{stream}",
                                                      note: "publish only, MPEG-TS")
    public var ingestProtocol: IngestProtocol { Self.ingestProtocol }

    /// The node's SRT listener on the context's address: `latencyMilliseconds` is the receiver's
    /// buffer (`--srt-latency`), and `ABR_WORKER_SRT_PASSPHRASE` in the environment encrypts it.
    public convenience init(_ context: IngestContext, latencyMilliseconds: Int) {
        var configuration = Configuration()
        configuration.host = context.host
        configuration.port = context.port
        configuration.latencyMilliseconds = latencyMilliseconds
        configuration.clock = context.clock
        configuration.passphrase = context.environment["ABR_WORKER_SRT_PASSPHRASE"].flatMap { $0.isEmpty ? nil : $0 }
        self.init(configuration: configuration, publishers: context.publishers, policy: context.policy)
    }
}
