#!/usr/bin/env python3
"""One round of misbehaving clients against a running node (soak.sh runs it every 20 s).

Each act is what an attack round found or what an attacker would try next; every one is
bounded in time and count and talks to loopback only. Prints one line per act with what the
node answered.

    hostile-clients.py RTSP_PORT HTTP_PORT RTP_PORT [RTMP_PORT SRT_PORT ADMIN_PASSWORD]

With the last three (soak.sh passes them) it also attacks the newer doors: RTMP chunk floods and
peers that never read, NAL-unit floods over RTMP and SRT (on a stream it provisions for itself,
with that stream's credentials), another session's UDP route, anonymous node requests, Stream
Manager 1.0 accessToken guesses, handshake floods with wrong credentials, and signed playback
without, or with forged, tokens.
"""
import base64, json, os, random, shutil, socket, struct, subprocess, sys, time, urllib.error, urllib.request

rtsp_port, http_port, rtp_port = (int(a) for a in sys.argv[1:4])
rtmp_port, srt_port = (int(a) for a in sys.argv[4:6]) if len(sys.argv) > 5 else (None, None)
admin_password = sys.argv[6] if len(sys.argv) > 6 else None
top = f"rtsp://127.0.0.1:{rtsp_port}/live/stream1_1"
rung = f"rtsp://127.0.0.1:{rtsp_port}/live/stream1_3"


def connect(port, timeout=3):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


def status(s):
    try:
        data = s.recv(4096)
    except OSError:
        return "timeout"
    return data.split(b"\r\n", 1)[0].decode("latin-1") if data else "closed"


def act(name, fn):
    try:
        print(f"hostile: {name}: {fn()}")
    except OSError as error:
        print(f"hostile: {name}: {error}")


def player_with_port_zero():
    s = connect(rtsp_port)
    s.sendall(f"SETUP {rung}/trackID=0 RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP;unicast;client_port=0-1\r\n\r\n".encode())
    return status(s)


def player_hoarding_sessions():
    s = connect(rtsp_port)
    answers = []
    for cseq in range(1, 21):
        s.sendall(f"SETUP {rung}/trackID=0 RTSP/1.0\r\nCSeq: {cseq}\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n".encode())
        line = status(s)
        answers.append(line.split(" ")[1] if " " in line else line)
    return " ".join(answers)


def trickled_header():
    s = connect(rtsp_port)
    for byte in f"OPTIONS {rung} RTSP/1.0\r\nCSeq: 1\r\nX-Slow: {'a' * 200}\r\n\r\n".encode():
        s.send(bytes([byte]))
        time.sleep(0.002)
    return status(s)


def header_injection():
    s = connect(rtsp_port)
    s.sendall(b"OPTIONS * RTSP/1.0\r\nCSeq: 1\rX-Injected: yes\r\n\r\n")
    return status(s)


def publisher_with_wrong_password():
    sdp = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=x\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n"
    s = connect(rtsp_port)
    s.sendall((f"ANNOUNCE {top} RTSP/1.0\r\nCSeq: 1\r\nAuthorization: Basic dXNlcjpub3BlCg==\r\n"
               f"Content-Type: application/sdp\r\nContent-Length: {len(sdp)}\r\n\r\n{sdp}").encode())
    return status(s)


def forged_datagrams():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for sequence in range(50):
        header = struct.pack("!BBHII", 0x80, 96, sequence, random.getrandbits(32), random.getrandbits(32))
        u.sendto(header + bytes([0x67]) + os.urandom(random.randint(0, 1200)), ("127.0.0.1", rtp_port))
    return "50 datagrams with random SSRCs"


def http_half_open():
    sockets = []
    for _ in range(40):
        try:
            sockets.append(connect(http_port))
        except OSError:
            break
    sockets[0].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    time.sleep(1)
    health = connect(http_port)
    health.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = status(health)
    for s in sockets:
        s.close()
    return f"{len(sockets)} idle connections held; /health meanwhile: {answer}"


def failed_logins():
    answers = []
    for _ in range(12):
        s = connect(http_port)
        s.sendall(b"PUT /as/v1/auth/login HTTP/1.1\r\nHost: x\r\nAuthorization: Basic YWRtaW46Z3Vlc3M=\r\nContent-Length: 0\r\n\r\n")
        line = status(s)
        answers.append(line.split(" ")[1] if " " in line else line)
        s.close()
    return " ".join(answers)


# --- Round three: the newer doors -------------------------------------------------------------

hostile_ladder = {"streamGuid": "live/hostile", "credentials": {"username": "h", "password": "hostile-pass"},
                  "playback": {"signed": True},
                  "streams": [{"streamGuid": "live/hostile_1", "abrLevel": 1,
                               "videoParams": {"videoWidth": 320, "videoHeight": 180, "videoBitRate": 300000}}]}


def http(method, path, body=None, headers=None):
    request = urllib.request.Request(f"http://127.0.0.1:{http_port}{path}", method=method,
                                     data=None if body is None else body.encode(), headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read().decode("latin-1")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("latin-1")


def provision_hostile_stream():
    basic = base64.b64encode(f"admin:{admin_password}".encode()).decode()
    status, body = http("PUT", "/as/v1/auth/login", headers={"Authorization": f"Basic {basic}"})
    if status != 200:
        return f"login {status}"
    token = json.loads(body)["token"]
    status, _ = http("POST", "/as/v1/streams/provision/default", json.dumps([hostile_ladder]),
                     {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    return f"provision {status} (409: kept from an earlier round)"


def rtmp_chunk(csid, typ, payload, chunk_size, timestamp=0, stream=1):
    parts = [bytes([csid]) + timestamp.to_bytes(3, "big") + len(payload).to_bytes(3, "big") + bytes([typ]) + struct.pack("<I", stream)]
    for start in range(0, max(1, len(payload)), chunk_size):
        parts.append((b"" if start == 0 else bytes([0xC0 | csid])) + payload[start:start + chunk_size])
    return b"".join(parts)


def amf_string(text):
    return b"\x02" + struct.pack(">H", len(text)) + text.encode()


def amf_command(name, transaction, *arguments):
    # connect's command object comes right after the transaction; other commands put a null there.
    body = amf_string(name) + b"\x00" + struct.pack(">d", transaction) + (b"" if name == "connect" else b"\x05")
    for argument in arguments:
        body += amf_string(argument) if isinstance(argument, str) else argument
    return rtmp_chunk(3, 20, body, 128, stream=0 if name == "connect" else 1)


def amf_object(**fields):
    return b"\x03" + b"".join(struct.pack(">H", len(k)) + k.encode() + amf_string(v) for k, v in fields.items()) + b"\x00\x00\x09"


def rtmp_connection(receive_buffer=4096):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    s.settimeout(3)
    s.connect(("127.0.0.1", rtmp_port))
    s.sendall(b"\x03" + bytes(1536 * 2))
    return s


def push(s, data, seconds):
    """Sends without reading for at most `seconds`; returns the bytes that went out."""
    s.setblocking(False)
    sent, deadline = 0, time.time() + seconds
    while sent < len(data) and time.time() < deadline:
        try:
            sent += s.send(data[sent:sent + 65536])
        except BlockingIOError:
            time.sleep(0.005)
        except OSError:
            break
    return sent


def closed_within(s, seconds):
    s.setblocking(True)
    s.settimeout(seconds)
    started = time.time()
    try:
        while s.recv(65536):
            pass
        return f"closed by the node after {time.time() - started:.1f} s"
    except socket.timeout:
        return f"still open after {seconds} s"
    except OSError as error:
        return f"closed by the node ({error.__class__.__name__})"


def rtmp_one_byte_chunks():
    size = 4 * 1024 * 1024
    data = rtmp_chunk(2, 1, struct.pack(">I", 1), 128, stream=0) + bytes([6, 0, 0, 0]) + size.to_bytes(3, "big") + bytes([9, 1, 0, 0, 0, 0x17])
    data += b"".join(bytes([0xC6, n & 0xFF]) for n in range(400_000))
    s = rtmp_connection()
    sent = push(s, data, 3)
    s.close()
    return f"{sent} bytes of 1-byte chunks sent without reading"


def rtmp_acknowledgement_flood():
    data = rtmp_chunk(2, 5, struct.pack(">I", 1), 128, stream=0) + rtmp_chunk(2, 1, struct.pack(">I", 1), 128, stream=0)
    data += b"".join(rtmp_chunk(4, 8, b"\xaf\x01\x02\x03", 1) for _ in range(50_000))
    s = rtmp_connection()
    sent = push(s, data, 3)
    s.close()
    return f"window 1, {sent} bytes of 1-byte chunks, never read"


def rtmp_never_reads():
    data = amf_command("connect", 1, amf_object(app="live")) + b"".join(amf_command("play", 0, "x") for _ in range(20_000))
    s = rtmp_connection()
    sent = push(s, data, 2)
    return f"{sent} bytes of commands, answers never read; {closed_within(s, 45)}"


def rtmp_nal_flood():
    # A real sequence header (the node reads pictures only after one), then one 8 MiB picture of
    # 1-byte NAL units (each 4 bytes of length and one byte). Built before connecting: a peer
    # silent for the node's idle timeout is closed.
    sps = bytes([0x67, 0x42, 0xC0, 0x1E, 0xDA, 0x02, 0x80, 0xBF, 0xE5, 0x84, 0, 0, 3, 0, 4, 0, 0, 3, 0, 0xF0, 0x3C, 0x58, 0xBA, 0x80])
    pps = bytes([0x68, 0xCE, 0x3C, 0x80])
    record = bytes([1, sps[1], sps[2], sps[3], 0xFF, 0xE1]) + struct.pack(">H", len(sps)) + sps + bytes([1]) + struct.pack(">H", len(pps)) + pps
    units = b"\x00\x00\x00\x01\x0c" * (8 * 1024 * 1024 // 5 - 2)
    media = rtmp_chunk(6, 9, b"\x17\x00\x00\x00\x00" + record, 128, stream=1) + rtmp_chunk(6, 9, b"\x27\x01\x00\x00\x00" + units, 128, stream=1)
    s = rtmp_connection(1 << 20)
    s.settimeout(3)
    s.recv(65536)
    s.sendall(amf_command("connect", 1, amf_object(app="live", tcUrl=f"rtmp://127.0.0.1:{rtmp_port}/live")))
    s.sendall(amf_command("createStream", 2) + amf_command("publish", 3, "hostile_1?user=h&password=hostile-pass", "live"))
    time.sleep(0.5)
    sent = push(s, media, 5)
    return f"{sent} bytes of 1-byte NAL units in one picture, dropped by the node (the publish goes on: {closed_within(s, 2)})"


def srt_nal_flood():
    if not shutil.which("ffmpeg"):
        return "skipped: no ffmpeg"
    ts = bytearray()
    def packets(pid, payload, counter):
        first = True
        while payload:
            take = min(184, len(payload))
            header = bytes([0x47, (pid >> 8) | (0x40 if first else 0), pid & 0xFF])
            if take < 184:
                stuffing = 184 - take - 1
                header += bytes([0x30 | counter, stuffing]) + ((b"\x00" + b"\xff" * (stuffing - 1)) if stuffing else b"")
            else:
                header += bytes([0x10 | counter])
            ts.extend(header + payload[:take])
            payload, first, counter = payload[take:], False, (counter + 1) & 15
    def section(body):
        length = len(body) - 1 + 4
        return bytes([0, body[0], 0xB0 | (length >> 8), length & 0xFF]) + body[1:] + bytes(4)
    for _ in range(3):
        packets(0, section(bytes([0, 0, 1, 0xC1, 0, 0, 0, 1, 0xF0, 0])), 0)
        packets(0x1000, section(bytes([2, 0, 1, 0xC1, 0, 0, 0xE1, 0, 0xF0, 0, 0x1B, 0xE1, 0, 0xF0, 0])), 0)
    packets(0x100, bytes([0, 0, 1, 0xE0, 0, 0, 0x80, 0x80, 5, 0x21, 0, 1, 0, 1]) + b"\x00\x00\x01\x65\x88" + b"\x00\x00\x01\x0c" * 200_000, 0)
    # The data demuxer and muxer move the bytes as they are: nothing parses them on the way. The
    # pipe stays open a while after them: SRT live mode drops what its receiver still holds for
    # its latency when a sender closes at once.
    url = f"srt://127.0.0.1:{srt_port}?streamid=publish:live/hostile_1:h:hostile-pass&pkt_size=1316"
    sender = subprocess.Popen(["ffmpeg", "-hide_banner", "-loglevel", "error", "-f", "data", "-i", "pipe:", "-map", "0",
                               "-c", "copy", "-f", "data", url], stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        sender.stdin.write(bytes(ts))
        sender.stdin.flush()
        time.sleep(3)
        sender.stdin.close()
        code = sender.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        sender.kill()
        code = "killed"
    return f"{len(ts)} bytes of filler units in one PES over SRT; ffmpeg exit {code} (the node's log says why it stopped)"


def udp_route_of_another_session():
    peer_ports = random.randrange(20000, 60000) & ~1
    player = connect(rtsp_port)
    player.sendall(f"SETUP {rung}/trackID=0 RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP;unicast;client_port={peer_ports}-{peer_ports + 1}\r\n\r\n".encode())
    first = status(player)
    sdp = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=x\r\nt=0 0\r\nm=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\na=control:streamid=0\r\n"
    url = f"rtsp://127.0.0.1:{rtsp_port}/live/hostile_1"
    publisher = connect(rtsp_port)
    publisher.sendall((f"ANNOUNCE {url} RTSP/1.0\r\nCSeq: 1\r\nAuthorization: Basic {base64.b64encode(b'h:hostile-pass').decode()}\r\n"
                       f"Content-Type: application/sdp\r\nContent-Length: {len(sdp)}\r\n\r\n{sdp}").encode())
    announced = publisher.recv(4096).decode("latin-1")
    session = next((line.split(":", 1)[1].split(";")[0].strip() for line in announced.split("\r\n") if line.lower().startswith("session:")), "")
    publisher.sendall(f"SETUP {url}/streamid=0 RTSP/1.0\r\nCSeq: 2\r\nSession: {session}\r\n"
                      f"Transport: RTP/AVP;unicast;client_port={peer_ports}-{peer_ports + 1};mode=record\r\n\r\n".encode())
    return f"player SETUP {first.split(' ')[1] if ' ' in first else first}; another session's ports: {status(publisher)}"


def anonymous_node_requests():
    answers = [http("GET", f"/as/v1/streams/stream/default/publish/live/hostile_1")[0] for _ in range(20)]
    return f"20 asks: {sorted(set(answers))}; another stream then: {http('GET', '/as/v1/streams/stream/default/publish/live/stream1_1')[0]}"


def access_token_guesses():
    answers = [http("GET", f"/streammanager/api/4.0/admin/event/meta/live/x?accessToken=guess{n}")[0] for n in range(15)]
    return " ".join(str(a) for a in answers)


def handshake_floods():
    refused = 0
    for _ in range(60):
        try:
            s = rtmp_connection(1 << 16)
            s.settimeout(2)
            s.recv(65536)
            s.sendall(amf_command("connect", 1, amf_object(app="live")) + amf_command("publish", 3, "hostile_1?user=h&password=wrong", "live"))
            refused += 1
            s.close()
        except OSError:
            pass
    return f"{refused} RTMP publishes with a wrong password (the node logs a line a second)"


def signed_playback_without_a_token():
    plain = http("GET", "/hls/live/hostile/master.m3u8")[0]
    forged = http("GET", "/hls/live/hostile/master.m3u8?token=9999999999.n.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")[0]
    s = connect(rtsp_port)
    s.sendall(f"DESCRIBE rtsp://127.0.0.1:{rtsp_port}/live/hostile_1 RTSP/1.0\r\nCSeq: 1\r\n\r\n".encode())
    return f"HLS {plain}, forged {forged}; RTSP {status(s)}"


# The attacker's own stream first, before the failed logins use up this address's login burst.
if rtmp_port is not None and admin_password:
    act("provision the attacker's own stream", provision_hostile_stream)
act("player with client_port=0-1", player_with_port_zero)
act("player hoarding sessions", player_hoarding_sessions)
act("trickled header", trickled_header)
act("header injection", header_injection)
act("publisher with a wrong password", publisher_with_wrong_password)
act("forged RTP datagrams", forged_datagrams)
act("HTTP half-open connections", http_half_open)
act("failed logins", failed_logins)
if rtmp_port is not None and admin_password:
    act("RTMP 1-byte chunks of a 4 MiB message", rtmp_one_byte_chunks)
    act("RTMP acknowledgement window of 1 byte", rtmp_acknowledgement_flood)
    act("RTMP 1-byte NAL units in an 8 MiB picture", rtmp_nal_flood)
    act("SRT filler units in one PES", srt_nal_flood)
    act("UDP SETUP naming another session's ports", udp_route_of_another_session)
    act("anonymous node requests", anonymous_node_requests)
    act("SM 1.0 accessToken guesses", access_token_guesses)
    act("RTMP handshakes with a wrong password", handshake_floods)
    act("signed playback without a token", signed_playback_without_a_token)
    act("RTMP peer that never reads", rtmp_never_reads)
