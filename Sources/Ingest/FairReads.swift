import NIOCore
import NIOPosix

extension ServerBootstrap {
    /// At most one read of at most 16 KiB per connection per turn of its event loop. NIO's
    /// default (up to four reads of up to 64 KiB) lets a peer that packs its stream into the
    /// smallest units the protocol allows (1-byte RTMP chunks, 4-byte interleaved RTP packets)
    /// hold the loop for a quarter megabyte of parsing while the publishers sharing that loop
    /// wait. 16 KiB a turn still carries hundreds of megabits a second per connection.
    public func sharingLoopsFairly() -> ServerBootstrap {
        childChannelOption(.maxMessagesPerRead, value: 1)
            .childChannelOption(.recvAllocator, value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 2048, maximum: 16384))
    }
}
