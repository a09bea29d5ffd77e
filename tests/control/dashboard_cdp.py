"""The dashboard in a real headless Chromium, driven through the DevTools protocol
(a minimal WebSocket client on the standard library, so nothing else is needed).

Checks that the page loads with every request staying on loopback, shows the
cluster's nodes and the running job's plots with points on them, and updates as
the job advances; keeps a screenshot. Exit status 0 when all held.
usage: dashboard_cdp.py URL SCREENSHOT.png EXPECTED_NODES"""
import base64, json, os, re, shutil, socket, struct, subprocess, sys, tempfile, time, urllib.request

url, shot, want_nodes = sys.argv[1], sys.argv[2], int(sys.argv[3])
exe = shutil.which("chromium") or shutil.which("chromium-browser")
if not exe:
    print("SKIP: needs chromium (Debian package chromium)")
    sys.exit(77)


class WS:
    """Text frames only, client side (masked), enough for the DevTools protocol."""

    def __init__(self, ws_url):
        assert ws_url.startswith("ws://")
        hostport, path = ws_url[5:].split("/", 1)
        host, port = hostport.split(":")
        self.s = socket.create_connection((host, int(port)), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, hostport, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.s.recv(1)
        assert b" 101 " in head.split(b"\r\n")[0], head
        self.next_id = 0
        self.events = []

    def _recv_exact(self, n):
        b = b""
        while len(b) < n:
            c = self.s.recv(n - len(b))
            if not c:
                raise EOFError("devtools closed")
            b += c
        return b

    def send(self, obj):
        data = json.dumps(obj).encode()
        hdr = bytearray([0x81])
        n = len(data)
        if n < 126:
            hdr.append(0x80 | n)
        elif n < 65536:
            hdr += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            hdr += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.s.sendall(bytes(hdr) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self):
        msg = b""
        while True:
            b0, b1 = self._recv_exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._recv_exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._recv_exact(8))[0]
            payload = self._recv_exact(n)
            msg += payload
            if b0 & 0x80:
                return json.loads(msg.decode())

    def call(self, method, **params):
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        while True:
            m = self.recv()
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            self.events.append(m)

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        return r.get("result", {}).get("value")


profile = tempfile.mkdtemp(prefix="atoll-chromium-")
proc = subprocess.Popen([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                         "--user-data-dir=" + profile, "--remote-debugging-port=0", "--window-size=1400,1000",
                         "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
failures = []


def check(cond, what):
    print(("ok: " if cond else "FAILED: ") + what)
    if not cond:
        failures.append(what)


def wait_for(expr, seconds):
    end = time.time() + seconds
    while time.time() < end:
        v = ws.eval(expr)
        if v:
            return v
        time.sleep(0.2)
    return ws.eval(expr)


try:
    port_file = os.path.join(profile, "DevToolsActivePort")
    for _ in range(300):
        if os.path.exists(port_file) and open(port_file).read().strip():
            break
        time.sleep(0.1)
    port = int(open(port_file).read().split()[0])
    targets = json.load(urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=10))
    page = [t for t in targets if t["type"] == "page"][0]
    ws = WS(page["webSocketDebuggerUrl"])
    ws.call("Network.enable")
    ws.call("Page.enable")
    ws.call("Page.navigate", url=url)
    check(wait_for("window.atoll && window.atoll.refreshes >= 1", 30), "the dashboard loads and fetches its data")
    nodes = wait_for("window.atoll.nodes === %d && document.querySelectorAll('.node').length" % want_nodes, 15)
    check(nodes == want_nodes, "the cluster view shows %s of %d nodes" % (nodes, want_nodes))
    held = ws.eval("document.querySelectorAll('.slot:not(.free)').length")
    check(held and held > 0, "the cluster view shows which job holds which GPU/slot (%s held)" % held)
    running = wait_for("document.querySelector('#jobhead .st-running') !== null", 15)
    check(running, "a running job is selected")
    pts = wait_for("(() => { const c = ['c-loss','c-tps','c-mfu','c-bub'].map(i => +document.getElementById(i).dataset.points);"
                   " return c.every(n => n > 1) ? c : null })()", 30)
    check(bool(pts), "the loss, tokens/s, MFU and bubble plots have points: %s" % pts)
    good = wait_for("(() => { const t = document.getElementById('goodput').textContent;"
                    " return /[0-9.]+% productive of/.test(t) && document.querySelectorAll('#goodput .gbar div').length === 6 ? t : null })()", 15)
    check(bool(good), "the job's goodput: productive share and the time lost by cause (%s)" % good)
    jobs_good = ws.eval("[...document.querySelectorAll('#jobs tr.job td:last-child')].map(td => td.textContent)")
    check(jobs_good and any(g.endswith("%") for g in jobs_good), "the jobs list has a goodput column: %s" % jobs_good)
    head = ws.eval("document.getElementById('jobhead').innerText")
    check(head and "time limit 1-02:03:04" in head, "the job's head shows its --time limit: %r" % head)
    cells = ws.eval("document.querySelectorAll('#layout .cell').length")
    check(cells and cells > 0, "the layout map shows %s ranks" % cells)
    labels = ws.eval("[...document.querySelectorAll('#layout .stage')].map(e => e.innerText.replace(/\\s+/g, ' '))")
    check(labels and all(re.fullmatch(r"stage \d+ \d+ layers?", l) for l in labels),
          "each pipeline stage's row says how many layers it holds: %s" % labels)
    step0 = ws.eval("window.atoll.lastStep")
    step1 = wait_for("window.atoll.lastStep > %d ? window.atoll.lastStep : 0" % step0, 20)
    check(bool(step1), "the page updates as the job advances (step %s, then %s)" % (step0, step1))
    png = base64.b64decode(ws.call("Page.captureScreenshot", format="png")["data"])
    os.makedirs(os.path.dirname(os.path.abspath(shot)), exist_ok=True)
    open(shot, "wb").write(png)
    check(len(png) > 10000, "screenshot kept: %s (%d bytes)" % (shot, len(png)))
    # every request the page made stayed on this machine
    urls = [e["params"]["request"]["url"] for e in ws.events if e.get("method") == "Network.requestWillBeSent"]
    outside = [u for u in urls if not (u.startswith("http://127.0.0.1") or u.startswith("data:") or u == "about:blank")]
    check(urls and not outside, "%d requests, none leaving loopback%s" % (len(urls), (": " + ", ".join(outside[:5])) if outside else ""))
except Exception as e:  # noqa: BLE001
    check(False, "devtools session: %r" % e)
finally:
    proc.kill()
    proc.wait()
    shutil.rmtree(profile, ignore_errors=True)
sys.exit(1 if failures else 0)
