#!/usr/bin/env python3
"""One round of misbehaving clients against a running node (soak.sh runs it every 20 s).

Each act is what issue 22 found or what an attacker would try next; every one is bounded in
time and count and talks to loopback only. Prints one line per act with what the node answered.

    hostile-clients.py RTSP_PORT HTTP_PORT RTP_PORT
"""
import os, random, socket, struct, sys, time

rtsp_port, http_port, rtp_port = (int(a) for a in sys.argv[1:4])
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


act("player with client_port=0-1", player_with_port_zero)
act("player hoarding sessions", player_hoarding_sessions)
act("trickled header", trickled_header)
act("header injection", header_injection)
act("publisher with a wrong password", publisher_with_wrong_password)
act("forged RTP datagrams", forged_datagrams)
act("HTTP half-open connections", http_half_open)
act("failed logins", failed_logins)
