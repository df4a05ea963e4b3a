#!/usr/bin/env python3
"""Many viewers of one rung, for the node's cost per viewer (Benchmarks/webrtc.sh).

Usage: webrtc-cost-viewers.py webrtc|rtsp N SECONDS WHEP_URL RTSP_URL

webrtc: N aiortc peer connections over WHEP, VIEWERS_PER_PROCESS (default 5) to a process. Their
decoders are left out (they return no frames): the benchmark measures the node, and N software
decoders would take the machine from it. Each still receives, decrypts and depacketizes
everything, and sends its receiver reports and REMB as aiortc does. Its offer names High as well
as aiortc's Constrained Baseline, so the node sends it the passed-through High top, as it would a
browser. One process cannot take 50 viewers of a 2 Mbit/s top (about 13,000 datagrams a second):
its sockets' buffers overflowed (two of every three datagrams dropped), its ICE consent checks
went unanswered, and aioice closed viewers 30 s in, after which the node sent into closed ports
until its own consent timeout (run cost-14). Five to a process keep up.

rtsp: N RTSP/TCP players (SETUP of the video and the audio interleaved, PLAY) that read and
discard, one thread each. They take the rung's audio as the WebRTC viewers do: until run cost-17
they set up the video alone, so the WebRTC side carried the audio's 50 packets a second per viewer
(a fifth of its datagrams) and the RTSP side none.

RTSP_SOURCE_PREFIX: the players' addresses where they are on a veth of their own (webrtc.sh's
`veth` cost link: "10.79.1.").

Prints a JSON line with how many viewers got video, and the bytes (RTSP) or packets (WebRTC) they
received; for WebRTC also how many were still connected at the end.
"""
import asyncio, json, os, subprocess, sys, threading, time, urllib.request

kind, count, seconds, whep_url, rtsp_url = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
source_prefix = os.environ.get("RTSP_SOURCE_PREFIX", "127.0.1.")


def run_rtsp():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from rtsp_play import start_session
    received = [0] * count
    end = time.time() + seconds

    def player(index):
        try:
            # Each from its own address (loopback's, or RTSP_SOURCE_PREFIX's where the players are
            # on a veth of their own): the node lets one address hold 32 RTSP sessions.
            sock, _, buffer = start_session(rtsp_url, (f"{source_prefix}{index % 250 + 1}", 0), audio=True)
            received[index] += len(buffer)
            sock.settimeout(2)
            while time.time() < end:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received[index] += len(chunk)
            sock.close()
        except (OSError, AttributeError) as error:  # AttributeError: a refusal has no Session header
            print(f"rtsp player {index}: {error}", file=sys.stderr)

    threads = [threading.Thread(target=player, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 5)
    print(json.dumps({"kind": "rtsp", "viewers": count, "playing": sum(1 for r in received if r > 0), "bytes": sum(received)}))


async def run_webrtc():
    from aiortc import RTCPeerConnection, RTCSessionDescription
    from aiortc.codecs import CODECS, h264, opus
    from aiortc.rtcrtpparameters import RTCRtcpFeedback, RTCRtpCodecParameters
    h264.H264Decoder.decode = lambda self, frame: []
    opus.OpusDecoder.decode = lambda self, frame: []
    # High, beside aiortc's two Constrained Baseline formats (payload types after its own).
    CODECS["video"] += [
        RTCRtpCodecParameters(mimeType="video/H264", clockRate=90000, payloadType=103,
                              rtcpFeedback=[RTCRtcpFeedback(type="nack"), RTCRtcpFeedback(type="nack", parameter="pli"),
                                            RTCRtcpFeedback(type="goog-remb")],
                              parameters={"level-asymmetry-allowed": "1", "packetization-mode": "1", "profile-level-id": "64001f"}),
        RTCRtpCodecParameters(mimeType="video/rtx", clockRate=90000, payloadType=104, parameters={"apt": 103}),
    ]
    received = [0] * count
    peers = []

    async def viewer(index):
        pc = RTCPeerConnection()
        peers.append(pc)
        pc.addTransceiver("video", direction="recvonly")
        pc.addTransceiver("audio", direction="recvonly")

        @pc.on("track")
        def on_track(track):
            async def drain():
                while True:
                    try:
                        await track.recv()
                    except Exception:
                        return
            asyncio.ensure_future(drain())

        await pc.setLocalDescription(await pc.createOffer())
        request = urllib.request.Request(whep_url, data=pc.localDescription.sdp.encode(), method="POST", headers={"Content-Type": "application/sdp"})
        try:
            answer = await asyncio.get_running_loop().run_in_executor(None, lambda: urllib.request.urlopen(request, timeout=10).read().decode())
        except Exception as error:
            print(json.dumps({"viewer": index, "error": str(error)}), file=sys.stderr)
            return
        await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))

    await asyncio.gather(*(viewer(i) for i in range(count)))
    await asyncio.sleep(seconds)
    total, playing = 0, 0
    for pc in peers:
        for receiver in pc.getReceivers():
            stats = await receiver.getStats()
            got = sum(getattr(s, "packetsReceived", 0) or 0 for s in stats.values() if s.type == "inbound-rtp")
            total += got
            playing += 1 if got > 0 and receiver.track.kind == "video" else 0
    connected = sum(1 for pc in peers if pc.connectionState == "connected")
    print(json.dumps({"kind": "webrtc", "viewers": count, "playing": playing, "packets": total, "connected": connected}))
    await asyncio.gather(*(pc.close() for pc in peers), return_exceptions=True)


def run_webrtc_processes():
    """The viewers, VIEWERS_PER_PROCESS to a process (this script again), their figures summed."""
    per_process = max(1, int(os.environ.get("VIEWERS_PER_PROCESS", "5")))
    shares = [min(per_process, count - start) for start in range(0, count, per_process)]
    children = [subprocess.Popen([sys.executable, __file__, "webrtc", str(share), str(seconds), whep_url, rtsp_url],
                                 env={**os.environ, "VIEWERS_PER_PROCESS": str(share)}, stdout=subprocess.PIPE, text=True)
                for share in shares]
    # Viewers are those asked for: a process that failed counts its viewers as not playing.
    summed = {"kind": "webrtc", "viewers": count, "playing": 0, "packets": 0, "connected": 0, "processes": len(children)}
    for child in children:
        out, _ = child.communicate()
        for line in out.splitlines():
            if line.startswith("{"):
                for key in ("playing", "packets", "connected"):
                    summed[key] += json.loads(line).get(key, 0)
    print(json.dumps(summed))


if kind == "rtsp":
    run_rtsp()
elif count > max(1, int(os.environ.get("VIEWERS_PER_PROCESS", "5"))):
    run_webrtc_processes()
else:
    asyncio.run(run_webrtc())
