#!/usr/bin/env python3
"""Players on replayed links, for `Benchmarks/edge.sh` (runs inside its network namespace).

Every player connects to its own address on the namespace's loopback (127.0.0.10, .11, ...), so
one tc htb class per player, matched on that address, shapes what the node sends it. A class has
the player's link model: its shaper's burst (htb `burst`/`cburst`, 1.5 KB to 64 KB: what a
cellular or Wi-Fi link lets through at once) and its queue (a pfifo of 10 to 1000 packets). Every
second the controller sets each class to its trace's next rate (a step for the step players).

Kinds of player, each on the same links:
- `reader`: a small RTSP client over TCP (interleaved) that records, per picture, when it arrived
  and its RTP time, writes the H.264 it got for ffprobe to decode, and sends a GET_PARAMETER
  keep-alive every 15 s and nothing else (no RTCP);
- `raw`: the same, but it sends nothing at all after PLAY and reads as fast as the link allows
  (a recorder, a relay, a small custom client);
- `ffmpeg` and `gst`: ffmpeg and GStreamer (rtspsrc over TCP, avdec_h264) decoding the stream;
  each decoded picture's arrival and time come from ffmpeg's showinfo and GStreamer's identity.

From that it reports, per player: the rate its link delivered (the class's bytes), freeze
seconds (a player that starts after 1 s of media and stalls when the next picture is late), lag
growth (how much further behind live it ended than it started, in median seconds over the first
and last 10 s), decoder errors, and switches (from the node's job view); for step players also
how long after each step the node decided to move it (its `playerSwitched` event) and how long
until the move landed (the first picture with the new rung's SPS); after a fall, also how long
until the node had it on a rung the new link carries by the node's own down thresholds (0 when
an earlier move had already put it there). Output: one JSON object per
player on standard output.

    edge-players.py RTSP_PORT STREAM HTTP_BASE SECONDS PLAYERS.json

PLAYERS.json: a list of {"name", "kind", "burst" (bytes), "queue" (packets), "rates" (kbit/s per
second), "step" (true for a step player)}.
"""
import json, re, struct, subprocess, sys, threading, time, urllib.request

from rtsp_play import start_session

port, stream, http_base, seconds = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
specs = json.load(open(sys.argv[5]))
FLOOR_KBPS = 8  # a trace's 0 kbit/s outage, as a class cannot be 0


def tc(*arguments):
    subprocess.run(["tc", *arguments], check=True, capture_output=True)


class Player(threading.Thread):
    keepalive = True

    def __init__(self, index, spec):
        super().__init__(daemon=True)
        self.index, self.name, self.spec = index, spec["name"], spec
        self.rates = [max(FLOOR_KBPS, int(rate)) for rate in spec["rates"]]
        self.address = f"127.0.0.{10 + index}"
        self.url = f"rtsp://{self.address}:{port}/{stream}"
        self.local_port = 41000 + index
        self.class_id = f"1:{100 + index}"
        self.pictures = []  # (arrival monotonic, media seconds)
        self.levels = []  # (monotonic, level)
        self.switches = 0
        self.annexb = open(f"{work}/player{index}.h264", "wb")
        self.access_unit = []  # the NAL units of the picture being received
        self.session = None
        self.last_sps = None
        self.sps_changes = []  # wall-clock times a different SPS (another rung) arrived
        self.errors = []
        self.error = None
        self.stop = False

    def shape(self, kbps):
        burst = str(self.spec["burst"])
        tc("class", "change", "dev", "lo", "parent", "1:", "classid", self.class_id, "htb", "rate", f"{kbps}kbit", "ceil", f"{kbps}kbit",
           "burst", burst, "cburst", burst)

    def setup_class(self):
        burst = str(self.spec["burst"])
        tc("class", "add", "dev", "lo", "parent", "1:", "classid", self.class_id, "htb", "rate", "100mbit", "ceil", "100mbit",
           "burst", burst, "cburst", burst)
        # The queue counts packets as a router on the path would: the kernel hands the qdisc a TCP
        # segmentation-offload send as one packet, so a token bucket far faster than any link cuts
        # it into its packets (tbf segments what exceeds its burst) before the pfifo.
        splitter = f"{100 + self.index}:"
        tc("qdisc", "add", "dev", "lo", "parent", self.class_id, "handle", splitter, "tbf", "rate", "10gbit", "burst", "1600", "limit", "100000")
        tc("qdisc", "add", "dev", "lo", "parent", f"{splitter}1", "handle", f"{1100 + self.index}:", "pfifo", "limit", str(self.spec["queue"]))
        tc("filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
           "match", "ip", "src", f"{self.address}/32", "flowid", self.class_id)

    def delivered_bytes(self):
        """What the player's link carried: its class's byte counter."""
        out = subprocess.run(["tc", "-s", "class", "show", "dev", "lo", "classid", self.class_id], capture_output=True, text=True).stdout
        found = re.search(r"Sent (\d+) bytes", out)
        return int(found.group(1)) if found else 0

    def run(self):
        try:
            self.play()
        except Exception as error:  # reported in the result, not fatal to the others
            self.error = repr(error)

    def play(self):
        s, session, buffer = start_session(self.url, ("127.0.0.1", self.local_port))
        self.session = session
        s.settimeout(None)  # a trace's outage can hold everything back for many seconds
        fragments, last, unwrapped = [], None, 0
        data, at = bytearray(buffer), 0  # parsed in place: slicing per packet would cost more than the link
        keepalive, sequence = time.monotonic() + 15, 3
        while not self.stop:
            if self.keepalive and time.monotonic() > keepalive:  # as most players do
                s.sendall(f"GET_PARAMETER {self.url} RTSP/1.0\r\nCSeq: {sequence}\r\nSession: {session}\r\n\r\n".encode())
                keepalive, sequence = time.monotonic() + 15, sequence + 1
            if len(data) - at < 4 or (data[at] == 0x24 and len(data) - at < 4 + (data[at + 2] << 8 | data[at + 3])):
                if at > 1 << 20:
                    del data[:at]
                    at = 0
                chunk = s.recv(262144)  # as fast as the link allows
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
            if marker:
                # Only whole access units reach the file: the one cut off when the window ends
                # (its parameter sets without its slices, say) is the reader's doing, not a
                # decoder error in what the node sent.
                self.annexb.write(b"".join(self.access_unit))
                self.access_unit.clear()
                if not self.stop:
                    self.pictures.append((time.monotonic(), unwrapped / 90000))

    def nal_unit(self, unit):
        self.access_unit.append(b"\x00\x00\x00\x01" + unit)
        if unit and unit[0] & 0x1F == 7:  # an SPS: a new one means the move to another rung landed
            if self.last_sps is not None and unit != self.last_sps:
                self.sps_changes.append(time.time())
            self.last_sps = bytes(unit)

    def report(self, start, delivered):
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
        errors = self.errors or self.decode_errors()
        return {"player": self.name, "kind": self.spec["kind"], "model": self.spec.get("model", ""), "mean": self.spec.get("mean", "own"),
                "trace": self.spec.get("trace", ""), "seconds": seconds, "meanLinkKbps": round(sum(self.rates) / max(1, len(self.rates))),
                "deliveredKbps": round(delivered * 8 / seconds / 1000), "freezeSeconds": round(freeze, 2),
                "starvedSeconds": sum(1 for rate in self.rates if rate < self.spec.get("lowestKbps", 0)),
                "lagGrowthSeconds": round(late - early, 2), "pictures": len(pictures), "switches": self.switches,
                "decoderErrors": len(errors), "decoderErrorSample": errors[:3], "levels": self.levels, "error": self.error}

    def decode_errors(self):
        decode = subprocess.run(["ffprobe", "-v", "error", "-f", "h264", "-show_entries", "frame=pkt_size", "-of", "csv=p=0",
                                 f"{work}/player{self.index}.h264"], capture_output=True, text=True)
        return [line for line in decode.stderr.splitlines() if line.strip()]


class RawReader(Player):
    """Sends nothing back after PLAY: no RTCP, no keep-alive; its TCP acknowledgements are all the node hears."""
    keepalive = False


class DecodingPlayer(Player):
    """A real player (ffmpeg or GStreamer) decoding the stream; each decoded picture's arrival
    and presentation time are read from its log as it writes them."""

    def command(self):
        if self.spec["kind"] == "ffmpeg":
            return ["ffmpeg", "-hide_banner", "-nostats", "-rtsp_transport", "tcp", "-i", self.url, "-map", "0:v", "-vf", "showinfo",
                    "-f", "null", "-"]
        return ["gst-launch-1.0", "-v", "rtspsrc", f"location={self.url}", "protocols=tcp", "latency=0", "!", "rtph264depay", "!",
                "h264parse", "!", "avdec_h264", "!", "identity", "silent=false", "!", "fakesink", "sync=false"]

    def play(self):
        process = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        self.process = process
        pts = re.compile(r"pts_time:([0-9.]+)") if self.spec["kind"] == "ffmpeg" else re.compile(r"identity.*pts: (\d+):(\d+):([0-9.]+)")
        for line in process.stdout:
            if self.stop:
                break
            found = pts.search(line)
            if found:
                media = float(found.group(1)) if len(found.groups()) == 1 else \
                    int(found.group(1)) * 3600 + int(found.group(2)) * 60 + float(found.group(3))
                self.pictures.append((time.monotonic(), media))
            elif re.search(r"error|concealing|corrupt|decode_slice", line, re.IGNORECASE) and "showinfo" not in line:
                self.errors.append(line.strip())
        process.kill()

    def finish(self):
        if getattr(self, "process", None):
            self.process.kill()


def job_players():
    try:
        with urllib.request.urlopen(f"{http_base}/v1/jobs", timeout=2) as reply:
            return [p for job in json.load(reply) for p in job.get("players", [])]
    except Exception:
        return []


def listen_for_switches(moves):
    """The job's event stream: every playerSwitched event with the node's time, as (time, detail)."""
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
kinds = {"reader": Player, "raw": RawReader, "ffmpeg": DecodingPlayer, "gst": DecodingPlayer}
players = [kinds[spec["kind"]](index, spec) for index, spec in enumerate(specs)]
for player in players:
    player.setup_class()
    player.start()
time.sleep(3)  # every player playing, on the wide link
start = time.monotonic()
base = {player.name: player.delivered_bytes() for player in players}
for player in players:
    player.changes = []  # (second, kbps, wall-clock time the link changed) of a step player
for second in range(int(seconds)):
    for player in players:
        if second < len(player.rates):
            player.shape(player.rates[second])
            if player.spec.get("step") and (second == 0 or player.rates[second] != player.rates[second - 1]):
                player.changes.append((second, player.rates[second], time.time()))
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
delivered = {player.name: player.delivered_bytes() for player in players}
for player in players:
    player.stop = True
    if isinstance(player, DecodingPlayer):
        player.finish()
for player in players:
    player.join(timeout=3)  # the frame in hand written whole
def down_thresholds():
    """Each level's down threshold (bit/s), from the hints the node publishes and switches by."""
    try:
        with urllib.request.urlopen(f"{http_base}/v1/streams/{stream}/abr", timeout=5) as reply:
            return {v["abrLevel"]: v["downswitchBelowBitRate"] for v in json.load(reply).get("variants", [])}
    except Exception:
        return {}


def carried_level(thresholds, kbps):
    """The highest rung (lowest level number) a link of `kbps` carries by those thresholds; the lowest rung if none."""
    fitting = [level for level, below in thresholds.items() if below <= kbps * 1000]
    return min(fitting) if fitting else max(thresholds, default=None)


thresholds = down_thresholds()
for player in players:
    result = player.report(start, delivered[player.name] - base[player.name])
    if player.spec.get("step"):
        reactions = []
        changes = player.changes
        # The node's decisions for this player, in order: (time, level it moved to).
        decisions = [(at, int(m.group(1))) for at, detail in moves if detail.startswith(f"session {player.session} ")
                     for m in [re.search(r" to \S+_(\d+): ", detail)] if m]
        for (second, kbps, wall), following in zip(changes[1:], changes[2:] + [(seconds, None, float("inf"))]):
            moved = [at for at, level in player.levels if second <= at < following[0] and at > second]
            decided = [at for at, _ in decisions if wall <= at < following[2]]
            landed = [at for at in player.sps_changes if wall <= at < following[2]]
            reaction = {"at": second, "kbps": kbps, "levelChangedAfter": round(moved[0] - second, 1) if moved else None,
                        "decidedAfter": round(decided[0] - wall, 2) if decided else None,
                        "landedAfter": round(landed[0] - wall, 2) if landed else None}
            # After a fall: how long until the node had put the player on a rung the new link
            # carries by its own down thresholds (0 when it was on one already). The first
            # decision alone says nothing of a player an earlier move had already taken down.
            previous = changes[changes.index((second, kbps, wall)) - 1][1]
            target = carried_level(thresholds, kbps)
            if kbps < previous and target is not None:
                before = [level for at, level in decisions if at < wall]
                level = before[-1] if before else next((lv for at, lv in reversed(player.levels) if at <= second), 1)
                reaction["carriedLevel"] = target
                if (level or 1) >= target:
                    reaction["onCarriedRungAfter"] = 0.0
                else:
                    reached = [at for at, to in decisions if wall <= at < following[2] and to >= target]
                    reaction["onCarriedRungAfter"] = round(reached[0] - wall, 2) if reached else None
            reactions.append(reaction)
        result["reactions"] = reactions
    print(json.dumps(result))
