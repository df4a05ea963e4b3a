import Foundation
import NIOCore
import NIOPosix
import RTSP
@testable import RTSPServer
import Testing

/// `TCP_INFO` read from a real loopback connection: the figures a player's estimate is made of.
@Suite struct TCPInfoTests {
    @Test func aConnectionThatCarriedDataReportsItsDeliveryRateAndRoundTrip() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let server = try await ServerBootstrap(group: group)
            .childChannelInitializer { channel in channel.eventLoop.makeSucceededVoidFuture() }
            .bind(host: "127.0.0.1", port: 0).get()
        let client = try await ClientBootstrap(group: group).connect(to: try #require(server.localAddress)).get()
        for _ in 0..<32 {
            try await client.writeAndFlush(ByteBuffer(repeating: 0x55, count: 64 * 1024)).get()
        }
        try await Task.sleep(for: .milliseconds(200))
        let info = try #require(try await client.tcpInfo().get(), "TCP_INFO unreadable")
        #expect(info.bytesAcked >= 32 * 64 * 1024)
        #expect(info.deliveryRate > 0 && info.roundTripTime > 0 && info.maximumSegmentSize > 0 && info.congestionWindow > 0, "\(info)")
        #expect(info.notSentBytes == 0)
        try await client.close().get()
        try await server.close().get()
        try await group.shutdownGracefully()
    }

    @Test func tooShortAStructIsNotRead() {
        #expect(TCPInfo(bytes: [UInt8](repeating: 0, count: TCPInfo.minimumSize - 1)) == nil)
        var bytes = [UInt8](repeating: 0, count: 232)
        bytes[7] = 1
        bytes[160] = 0x40  // 64 bytes/s
        #expect(TCPInfo(bytes: bytes).map { $0.deliveryRateAppLimited && $0.deliveryRate == 64 } == true)
    }
}
