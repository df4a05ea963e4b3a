"""Starting an RTSP/TCP player session by hand, shared by the benchmark players."""
import re
import socket


def start_session(url, source, play_url=None, audio=False):
    """Connects from `source` (address, port), SETUPs the video track interleaved on channels 0-1
    (and with `audio`, the audio track on 2-3, in the same session, as ffplay, VLC and GStreamer
    do) and PLAYs `play_url` (default `url`). Returns the socket, the session id and the bytes
    already read past the PLAY request's headers (the first media may follow at once)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(source)
    host, port = re.match(r"rtsp://([^:/]+):(\d+)/", url).groups()
    s.connect((host, int(port)))
    s.settimeout(5)

    def request(text):
        """Sends one request and reads its response's headers; returns them and what followed."""
        s.sendall(text.encode())
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed during {text.split()[0]}")
            buffer += chunk
        head, _, rest = buffer.partition(b"\r\n\r\n")
        return head.decode(errors="replace"), rest

    head, buffer = request(f"SETUP {url}/trackID=0 RTSP/1.0\r\nCSeq: 1\r\nTransport: RTP/AVP/TCP;unicast;interleaved=0-1\r\n\r\n")
    session = re.search(r"Session: *([^;\r\n]+)", head).group(1)
    if audio:
        head, buffer = request(f"SETUP {url}/trackID=1 RTSP/1.0\r\nCSeq: 2\r\nSession: {session}\r\n"
                               f"Transport: RTP/AVP/TCP;unicast;interleaved=2-3\r\n\r\n")
        if not head.startswith("RTSP/1.0 200"):
            raise ConnectionError(f"audio SETUP refused: {head.splitlines()[0]}")
    s.sendall(f"PLAY {play_url or url} RTSP/1.0\r\nCSeq: 3\r\nSession: {session}\r\n\r\n".encode())
    return s, session, buffer
