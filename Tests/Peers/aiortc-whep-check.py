#!/usr/bin/env python3
"""Plays a stream over WHEP with aiortc (a second WebRTC stack, independent of Chromium's, that
sends REMB and receiver reports but no transport-wide feedback) and reports what it decoded.

Usage: aiortc-whep-check.py WHEP_URL [seconds] [min_frames] [status_url]

With status_url, what that URL answers while the viewer still plays is printed as "nodeStatus".

With WHEP_CLOSE_ONLY=1 in the environment it ends without the WHEP DELETE, closing only its
peer connection (DTLS close_notify), as a browser tab that closes does. With
WHEP_SRTP=AES_CM_128_HMAC_SHA1_80 it offers that SRTP profile alone in its DTLS handshake (aiortc
otherwise prefers AES-GCM, as browsers do).

Prints one JSON line per second (frames decoded, picture size, audio frames) and a summary;
exits 0 once min_frames pictures (default 60) and a second of audio were decoded, 1 otherwise.
"""
import asyncio, json, os, sys, time, urllib.request

from aiortc import RTCPeerConnection, RTCSessionDescription


if os.environ.get("WHEP_SRTP") == "AES_CM_128_HMAC_SHA1_80":
    import aiortc.rtcdtlstransport as dtls
    dtls.SRTP_PROFILES[:] = [dtls.SRTP_AES128_CM_SHA1_80]


async def main():
    url = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 20
    wanted = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    pc = RTCPeerConnection()
    pc.addTransceiver("video", direction="recvonly")
    pc.addTransceiver("audio", direction="recvonly")
    counts = {"frames": 0, "width": 0, "height": 0, "audioFrames": 0, "audioSamples": 0, "firstFrameAfterPost": None}
    tasks = []

    async def consume(track):
        while True:
            try:
                frame = await track.recv()
            except Exception:
                return
            if track.kind == "video":
                counts["frames"] += 1
                counts["width"], counts["height"] = frame.width, frame.height
                if counts["firstFrameAfterPost"] is None:
                    counts["firstFrameAfterPost"] = round(time.time() - posted, 3)
            else:
                counts["audioFrames"] += 1
                counts["audioSamples"] += frame.samples

    @pc.on("track")
    def on_track(track):
        tasks.append(asyncio.ensure_future(consume(track)))

    await pc.setLocalDescription(await pc.createOffer())
    request = urllib.request.Request(url, data=pc.localDescription.sdp.encode(), method="POST",
                                     headers={"Content-Type": "application/sdp"})
    posted = time.time()
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = response.read().decode()
            location = response.headers.get("Location")
            status = response.status
    except urllib.error.HTTPError as error:
        print(json.dumps({"error": error.code, "body": error.read().decode()[:500]}), flush=True)
        await pc.close()
        return 1
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    end = time.time() + seconds
    ok = False
    while time.time() < end:
        await asyncio.sleep(1)
        print(json.dumps({"status": status, "connection": pc.connectionState, **counts}), flush=True)
        ok = counts["frames"] >= wanted and counts["width"] > 0 and counts["audioSamples"] >= 48000
        if ok:
            break
    node_status = None
    if len(sys.argv) > 4:
        try:
            with urllib.request.urlopen(sys.argv[4], timeout=5) as response:
                node_status = json.loads(response.read().decode())
        except Exception as error:
            node_status = {"error": str(error)}
    print(json.dumps({"decoded": ok, "location": location, **counts, "nodeStatus": node_status}), flush=True)
    # WHEP_CLOSE_ONLY=1: end as a browser tab that closes does, with the peer connection's DTLS
    # close_notify and no DELETE.
    if location and os.environ.get("WHEP_CLOSE_ONLY") != "1":
        base = url.split("/whep/")[0]
        try:
            urllib.request.urlopen(urllib.request.Request(base + location, method="DELETE"), timeout=5).read()
        except Exception as error:
            print(json.dumps({"deleteError": str(error)}), flush=True)
    for task in tasks:
        task.cancel()
    await pc.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
