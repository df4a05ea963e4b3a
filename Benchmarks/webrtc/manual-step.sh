#!/bin/bash
# manual WHEP step: ns t3, node inside, chromium inside, htb on node's UDP port
cd /work/main
pkill -9 -f "abr-worker serve"; ip netns del t3 2>/dev/null
ip netns add t3; ip -n t3 link set lo mtu 1500 up
ip -n t3 link add abr-v0 type veth peer name abr-v1
ip -n t3 addr add 10.77.0.1/24 dev abr-v0; ip -n t3 addr add 10.77.0.2/24 dev abr-v1
ip -n t3 link set abr-v0 up; ip -n t3 link set abr-v1 up; ip -n t3 route add default via 10.77.0.2 dev abr-v0
tc -n t3 qdisc add dev lo root handle 1: htb default 10 r2q 1000
tc -n t3 class add dev lo parent 1: classid 1:10 htb rate 10gbit
tc -n t3 class add dev lo parent 1: classid 1:20 htb rate 100000kbit ceil 100000kbit
tc -n t3 qdisc add dev lo parent 1:20 pfifo limit 100
tc -n t3 filter add dev lo parent 1: protocol ip prio 1 u32 match ip protocol 17 0xff match ip sport 18189 0xffff flowid 1:20
cat > /tmp/prov.json <<'P'
[{"streamGuid": "live/stream1", "messageType": "ProvisionCommand", "credentials": {"username": "user", "password": "pass"},
  "streams": [
    {"streamGuid": "live/stream1_1", "abrLevel": 1, "videoParams": {"videoBitRate": 1600000, "videoWidth": 1280, "videoHeight": 720}},
    {"streamGuid": "live/stream1_2", "abrLevel": 2, "videoParams": {"videoBitRate": 800000, "videoWidth": 854, "videoHeight": 480}},
    {"streamGuid": "live/stream1_3", "abrLevel": 3, "videoParams": {"videoBitRate": 300000, "videoWidth": 640, "videoHeight": 360}}]}]
P
rm -rf /tmp/wdata3
ip netns exec t3 env ABR_WORKER_LOG_LEVEL=${LOGLEVEL:-debug} ABR_WORKER_ADMIN_PASSWORD=x ABR_WORKER_JWT_SECRET=0123456789abcdef0123456789abcdef .build/debug/abr-worker serve --host 127.0.0.1 --rtsp-port 18554 --rtmp-port=-1 --srt-port=-1 --http-port 18080 --webrtc-port 18189 --data-dir /tmp/wdata3 --no-load-shedding --provision /tmp/prov.json --publish-loop Fixtures/720p30-h264-aac.mp4 > /tmp/node3.out 2> /tmp/node3.log &
sleep 10
ip netns exec t3 python3 Tests/Peers/chromium-whep-check.py http://127.0.0.1:18080/play/live/stream1_1 ${SECONDS_TOTAL:-85} 0 > /tmp/chrome3.log 2>&1 &
sleep 20; echo "1300 at $(date +%T)"; tc -n t3 class change dev lo parent 1: classid 1:20 htb rate 1300kbit ceil 1300kbit
sleep 15; echo "650 at $(date +%T)"; tc -n t3 class change dev lo parent 1: classid 1:20 htb rate 650kbit ceil 650kbit
sleep 15; echo "wide at $(date +%T)"; tc -n t3 class change dev lo parent 1: classid 1:20 htb rate 100000kbit ceil 100000kbit
sleep 30
python3 - <<'PY'
import json
rows=[json.loads(l) for l in open('/tmp/chrome3.log') if l.startswith('{')]
print(' '.join(f"{r.get('t',0):.0f}:{r.get('frameWidth',0)}:{r.get('totalFreezesDuration',0):.1f}" for r in rows[::2]))
PY
pkill -f "abr-worker serve --host 127.0.0.1 --rtsp-port 18554"; ip netns del t3
