#!/usr/bin/env python3
"""Players on replayed links, for `Benchmarks/edge.sh` (runs inside its network namespace).

Each player is a small RTSP client over TCP (interleaved) bound to its own local port, so one
tc htb class per player shapes what the node sends it. Every second the controller sets each
class to its trace's next rate (a step for the step player). Each player records, per picture,
when it arrived and its RTP time, and writes the H.264 it got (Annex B) for ffprobe to decode.

From that it reports, per player: the rate it received, freeze seconds (a player that starts
after 1 s of media and stalls when the next picture is late), lag growth (how much further
behind live it ended than it started, in median seconds over the first and last 10 s), and
switches (from the node's job view); for the step player also how long after each step the node
decided to move it (its `playerSwitched` event, read from the job's event stream) and how long
until the move landed (the first picture with the new rung's SPS). Output: one JSON object per
player on standard output.

    edge-players.py RTSP_URL HTTP_BASE SECONDS STEP|- TRACE...   (TRACE: path@start_seconds)
"""
import json, re, struct, subprocess, sys, threading, time, urllib.request

from rtsp_play import start_session

url, http_base, seconds, step_spec = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
traces = sys.argv[5:]
FLOOR_KBPS = 8  # a trace's 0 kbit/s outage, as a class cannot be 0


def tc(*arguments):
    subprocess.run(["tc", *arguments], check=True, capture_output=True)


def load_trace(spec):
    if spec.startswith("wide"):  # a clean link all along: "wide@<n>" names player n
        return spec.replace("@", "-"), [100000] * int(seconds)
    path, start = spec.rsplit("@", 1)
    entries = json.load(open(path))
    rates = []
    for entry in entries:
        for _ in range(max(1, round(entry["duration_ms"] / 1000))):
            rates.append(max(FLOOR_KBPS, int(entry["bandwidth_kbps"])))
    first = int(float(start))
    return path.rsplit("/", 1)[-1], rates[first:first + int(seconds)]


class Player(threading.Thread):
    def __init__(self, index, name, rates):
        super().__init__(daemon=True)
        self.index, self.name, self.rates = index, name, rates
        self.local_port = 41000 + index
        self.class_id = f"1:{100 + index}"
        self.pictures = []  # (arrival monotonic, rtp seconds)
        self.bytes = 0
        self.levels = []  # (monotonic, level)
        self.switches = 0
        self.annexb = open(f"{work}/player{index}.h264", "wb")
        self.session = None
        self.last_sps = None
        self.sps_changes = []  # wall-clock times a different SPS (another rung) arrived
        self.error = None
        self.stop = False

    def shape(self, kbps):
        tc("class", "change", "dev", "lo", "parent", "1:", "classid", self.class_id, "htb", "rate", f"{kbps}kbit", "ceil", f"{kbps}kbit")

    def setup_class(self):
        tc("class", "add", "dev", "lo", "parent", "1:", "classid", self.class_id, "htb", "rate", "100mbit", "ceil", "100mbit")
        tc("filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
           "match", "ip", "dport", str(self.local_port), "0xffff", "flowid", self.class_id)

    def run(self):
        try:
            self.play()
        except Exception as error:  # reported in the result, not fatal to the others
            self.error = repr(error)

    def play(self):
        s, session, buffer = start_session(url, ("127.0.0.1", self.local_port))
        self.session = session
        s.settimeout(None)  # a trace's outage can hold everything back for many seconds
        fragments, last, unwrapped = [], None, 0
        data, at = bytearray(buffer), 0  # parsed in place: slicing per packet would cost more than the link
        keepalive, sequence = time.monotonic() + 15, 3
        while not self.stop:
            if time.monotonic() > keepalive:  # as players do: the session must not time out
                s.sendall(f"GET_PARAMETER {url} RTSP/1.0\r\nCSeq: {sequence}\r\nSession: {session}\r\n\r\n".encode())
                keepalive, sequence = time.monotonic() + 15, sequence + 1
            if len(data) - at < 4 or (data[at] == 0x24 and len(data) - at < 4 + (data[at + 2] << 8 | data[at + 3])):
                if at > 1 << 20:
                    del data[:at]
                    at = 0
                chunk = s.recv(262144)
                if not chunk:
                    return
                data += chunk
                continue
            if data[at] != 0x24:  # an RTSP answer between frames
                cut = data.find(b"$", at)
                at = cut if cut >= 0 else len(data)
                continue
            channel, size = data[at + 1], data[at + 2] << 8 | data[at + 3]
            packet = bytes(data[at + 4:at + 4 + size])
            at += 4 + size
            if channel != 0 or len(packet) < 13:
                continue
            if not self.stop:
                self.bytes += len(packet)
            marker = packet[1] & 0x80
            timestamp = struct.unpack("!I", packet[4:8])[0]
            if last is not None:
                step = (timestamp - last) & 0xFFFFFFFF
                unwrapped += step if step < 0x80000000 else step - 0x100000000
            last = timestamp
            payload = packet[12 + 4 * (packet[0] & 0x0F):]
            kind = payload[0] & 0x1F
            if kind == 28 and len(payload) > 2:  # FU-A
                if payload[1] & 0x80:
                    fragments = [bytes([(payload[0] & 0xE0) | (payload[1] & 0x1F)])]
                fragments.append(payload[2:])
                if payload[1] & 0x40:
                    self.nal_unit(b"".join(fragments))
            elif kind == 24:  # STAP-A
                index = 1
                while index + 2 <= len(payload):
                    length = struct.unpack("!H", payload[index:index + 2])[0]
                    self.nal_unit(payload[index + 2:index + 2 + length])
                    index += 2 + length
            else:
                self.nal_unit(payload)
            if marker and not self.stop:
                self.pictures.append((time.monotonic(), unwrapped / 90000))

    def nal_unit(self, unit):
        self.annexb.write(b"\x00\x00\x00\x01" + unit)
        if unit and unit[0] & 0x1F == 7:  # an SPS: a new one means the move to another rung landed
            if self.last_sps is not None and unit != self.last_sps:
                self.sps_changes.append(time.time())
            self.last_sps = bytes(unit)

    def report(self, start):
        self.annexb.flush()
        pictures = [(a - start, t) for a, t in self.pictures]
        freeze, lags = 0.0, []
        if pictures:
            first_arrival, first_media = pictures[0]
            play_start = first_arrival + 1.0  # a second of media before playing
            for arrival, media in pictures:
                due = play_start + (media - first_media)
                if arrival > due + 0.1:  # late: the picture on screen froze meanwhile
                    freeze += arrival - due
                    play_start += arrival - due
                elif due - arrival > 5:  # a skip to the live edge: play on from here
                    play_start -= due - arrival - 1.0
                lags.append((arrival, arrival - (media - first_media) - first_arrival))

        def median(values):
            values = sorted(values)
            return values[len(values) // 2] if values else float("nan")
        early = median([lag for at, lag in lags if at < lags[0][0] + 10]) if lags else float("nan")
        late = median([lag for at, lag in lags if at > lags[-1][0] - 10]) if lags else float("nan")
        decode = subprocess.run(["ffprobe", "-v", "error", "-f", "h264", "-show_entries", "frame=pkt_size", "-of", "csv=p=0",
                                 f"{work}/player{self.index}.h264"], capture_output=True, text=True)
        errors = [line for line in decode.stderr.splitlines() if line.strip()]
        return {"player": self.name, "seconds": seconds, "meanLinkKbps": round(sum(self.rates) / max(1, len(self.rates))),
                "deliveredKbps": round(self.bytes * 8 / seconds / 1000), "freezeSeconds": round(freeze, 2),
                "lagGrowthSeconds": round(late - early, 2), "switches": self.switches, "decoderErrors": len(errors),
                "decoderErrorSample": errors[:3], "levels": self.levels, "error": self.error}


def job_players():
    try:
        with urllib.request.urlopen(f"{http_base}/v1/jobs", timeout=2) as reply:
            return [p for job in json.load(reply) for p in job.get("players", [])]
    except Exception:
        return []


def listen_for_switches(moves):
    """The job's event stream: every playerSwitched event with the node's time, as (time, detail)."""
    stream = re.sub(r"^rtsp://[^/]+/", "", url)
    try:
        with urllib.request.urlopen(f"{http_base}/v1/streams/{stream}/events", timeout=seconds + 60) as reply:
            for line in reply:
                if line.startswith(b"data: "):
                    event = json.loads(line[6:])
                    if event.get("kind") == "playerSwitched":
                        moves.append((event["time"], event["detail"]))
    except Exception:
        pass


work = (sys.argv[0].rsplit("/", 1)[0] if "/" in sys.argv[0] else ".") + "/work/edge"
moves = []  # (node's wall-clock time, detail) of every switch
threading.Thread(target=listen_for_switches, args=(moves,), daemon=True).start()
players = [Player(i, *load_trace(spec)) for i, spec in enumerate(traces)]
step_player = None
if step_spec != "-":
    # "wide:10,1300:15,650:15,wide:25": rate in kbit/s for that many seconds.
    rates = []
    for part in step_spec.split(","):
        rate, length = part.split(":")
        rates += [100000 if rate == "wide" else int(rate)] * int(length)
    step_player = Player(len(players), "step", rates)
    players.append(step_player)
for player in players:
    player.setup_class()
    player.start()
time.sleep(3)  # every player playing, on the wide link
start = time.monotonic()
changes = []  # (second, kbps, wall-clock time the link changed) of the step player
for second in range(int(seconds)):
    for player in players:
        if second < len(player.rates):
            player.shape(player.rates[second])
            if player is step_player and (second == 0 or player.rates[second] != player.rates[second - 1]):
                changes.append((second, player.rates[second], time.time()))
    status = {p["address"]: p for p in job_players() if p.get("address")}
    for player in players:
        seen = status.get(f"127.0.0.1:{player.local_port}")
        if seen:
            if not player.levels or player.levels[-1][1] != seen.get("abrLevel"):
                player.levels.append((round(time.monotonic() - start, 1), seen.get("abrLevel")))
            player.switches = seen.get("switches", 0)
    print(f"\r{second + 1}/{int(seconds)} s", end="", file=sys.stderr, flush=True)
    time.sleep(max(0.0, start + second + 1 - time.monotonic()))
print(file=sys.stderr)
for player in players:
    player.stop = True
for player in players:
    player.join(timeout=3)  # the frame in hand written whole
for player in players:
    result = player.report(start)
    if player is step_player:
        reactions = []
        for (second, kbps, wall), following in zip(changes[1:], changes[2:] + [(seconds, None, float("inf"))]):
            moved = [at for at, level in player.levels if second <= at < following[0] and at > second]
            decided = [at for at, detail in moves if detail.startswith(f"session {player.session} ") and wall <= at < following[2]]
            landed = [at for at in player.sps_changes if wall <= at < following[2]]
            reactions.append({"at": second, "kbps": kbps, "levelChangedAfter": round(moved[0] - second, 1) if moved else None,
                              "decidedAfter": round(decided[0] - wall, 2) if decided else None,
                              "landedAfter": round(landed[0] - wall, 2) if landed else None})
        result["reactions"] = reactions
    print(json.dumps(result))
