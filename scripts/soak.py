#!/usr/bin/env python3
"""Soak benchmark of `pagoda serve` (not a test): one server, DURATION seconds of mixed traffic, then
the figures that say whether it can run for days.

Traffic (WORKERS threads, each picking a kind at random per request, one of 100 API keys each time):
  stream      streaming chat completion, read to [DONE]
  plain       non-streaming chat or text completion
  cancel      streaming request, hang up after the first chunks (the server must cancel it)
  malformed   bad JSON, a NUL byte, text/plain, Transfer-Encoding gzip, an unknown field type,
              a wrong key (401), too many sequences, a truncated body, an unknown route
A sampler thread times GET /health every HEALTH_PERIOD s and reads the server's resident memory
(/proc/PID/status VmRSS) every RSS_PERIOD s.

Reported (text, and JSON with --json):
  - RSS slope after warm-up (least squares over the samples after --warmup s), MiB/hour, and the
    RSS at warm-up end and at the end; the same for the heap and small anonymous mappings alone
    (RSS less the KV pool's and other preallocated buffers' pages, which become resident as they
    are first used, up to their size, and less the
    memory-mapped weights' file pages): a leak shows there;
  - KV blocks at the end, once traffic stopped: pagoda:kv_cache_free_blocks == pagoda:kv_cache_blocks
    and no request running or waiting;
  - /health latency p50 / p99 / max over the whole run, and per 5-minute window p99;
  - requests per kind and status; unexpected outcomes (5xx, wrong status for a malformed request,
    a stream without [DONE]) are listed and make the exit code 1.

Usage: scripts/soak.py [--binary build/pagoda] [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
                       [--duration 1800] [--warmup 300] [--workers 6] [--json out.json]
Standard library only.
"""
import argparse
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = [f"soak-key-{i:03d}" for i in range(100)]
PROMPTS = ["Write a haiku about the sea.", "What is the capital of France?", "Name three colors.",
           "Tell me a short story about a cat.", "Explain what a CPU does in one sentence.",
           "List the days of the week.", "How many legs does a spider have?", "Say hello in Spanish."]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(q / 100.0 * (len(xs) - 1)))))
    return xs[k]


def slope_per_hour(points):
    """Least-squares slope of (t seconds, value) in value units per hour."""
    if len(points) < 3:
        return float("nan")
    ts = [p[0] for p in points]
    vs = [p[1] for p in points]
    mt, mv = statistics.fmean(ts), statistics.fmean(vs)
    den = sum((t - mt) ** 2 for t in ts)
    return 3600.0 * sum((t - mt) * (v - mv) for t, v in zip(ts, vs)) / den if den else float("nan")


class Soak:
    def __init__(self, args):
        self.args = args
        self.port = free_port()
        self.lock = threading.Lock()
        self.counts = {}
        self.unexpected = []
        self.health = []  # (t, seconds)
        self.rss = []     # (t, MiB)
        self.rss_rest = []  # (t, MiB): RSS less big anonymous buffers and file pages
        self.stop = threading.Event()
        self.t0 = None

    # ---- server ----
    def start_server(self):
        self.log = tempfile.NamedTemporaryFile(prefix="pagoda-soak-", suffix=".log", delete=False)
        cmd = [self.args.binary, "serve", "--model", self.args.model, "--port", str(self.port),
               "--max-model-len", str(self.args.max_model_len), "--max-num-seqs", str(self.args.max_num_seqs),
               "--max-queued-requests", "64"]
        for k in KEYS:
            cmd += ["--api-key", k]
        cmd += self.args.serve_args
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"soak: the server exited with {self.proc.returncode}; log {self.log.name}")
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise SystemExit("soak: the server did not become healthy")

    def conn(self, timeout=300):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def get(self, path, headers=None, timeout=30):
        c = self.conn(timeout)
        try:
            c.request("GET", path, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def metric(self, name):
        status, body = self.get("/metrics", headers={"Authorization": "Bearer " + KEYS[0]})
        total = None
        for line in body.decode().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
        return total

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
        return float("nan")

    def rss_parts_mib(self):
        """Resident MiB by kind of mapping (/proc/PID/smaps): the KV pool and other preallocated
        buffers (anonymous mappings over 64 MiB, i.e. larger than any malloc arena; resident as
        their pages are first touched: bounded by their size), file
        pages (the memory-mapped weights, resident as rows are first read), and the rest (heap and
        small anonymous mappings: where a leak would show)."""
        parts = {"big_anon": 0.0, "file": 0.0, "rest": 0.0}
        kind = "rest"
        with open(f"/proc/{self.proc.pid}/smaps") as f:
            for line in f:
                p = line.split()
                if "-" in p[0] and not p[0].endswith(":"):
                    lo, hi = p[0].split("-")
                    name = p[5] if len(p) > 5 else ""
                    kind = ("file" if name.startswith("/") else
                            "big_anon" if not name and int(hi, 16) - int(lo, 16) > (64 << 20) else "rest")
                elif p[0] == "Rss:":
                    parts[kind] += int(p[1]) / 1024.0
        return parts

    # ---- bookkeeping ----
    def count(self, kind, status):
        with self.lock:
            self.counts.setdefault(kind, {}).setdefault(str(status), 0)
            self.counts[kind][str(status)] += 1

    def bad(self, what):
        with self.lock:
            if len(self.unexpected) < 200:
                self.unexpected.append(f"{time.time() - self.t0:.0f}s: {what}")

    # ---- traffic ----
    def auth(self, rng):
        return {"Authorization": "Bearer " + rng.choice(KEYS), "Content-Type": "application/json"}

    def chat_body(self, rng, stream):
        return {"messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
                "max_tokens": rng.randint(8, 64), "temperature": rng.choice([0, 0.7]), "stream": stream}

    def do_stream(self, rng):
        c = self.conn()
        try:
            c.request("POST", "/v1/chat/completions", json.dumps(self.chat_body(rng, True)), self.auth(rng))
            r = c.getresponse()
            body = r.read().decode(errors="replace")
            self.count("stream", r.status)
            if r.status == 200 and not body.rstrip().endswith("data: [DONE]"):
                self.bad("stream without [DONE]")
            elif r.status not in (200, 429):
                self.bad(f"stream: status {r.status}: {body[:200]}")
        finally:
            c.close()

    def do_plain(self, rng):
        c = self.conn()
        try:
            if rng.random() < 0.5:
                c.request("POST", "/v1/chat/completions", json.dumps(self.chat_body(rng, False)), self.auth(rng))
            else:
                body = {"prompt": rng.choice(PROMPTS), "max_tokens": rng.randint(4, 48), "n": rng.choice([1, 1, 2])}
                c.request("POST", "/v1/completions", json.dumps(body), self.auth(rng))
            r = c.getresponse()
            data = r.read()
            self.count("plain", r.status)
            if r.status == 200:
                json.loads(data)["choices"]
            elif r.status != 429:
                self.bad(f"plain: status {r.status}: {data[:200]}")
        finally:
            c.close()

    def do_cancel(self, rng):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=120)
        try:
            body = json.dumps(dict(self.chat_body(rng, True), max_tokens=256, ignore_eos=True)).encode()
            head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {rng.choice(KEYS)}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
            s.sendall(head + body)
            got = b""
            want = rng.randint(1, 4)
            while got.count(b"data: ") < want:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
            self.count("cancel", got[9:12].decode(errors="replace") or "eof")
        finally:
            s.close()

    MALFORMED = [
        ("bad_json", b"{not json", "application/json", 400),
        ("nul", b'{"prompt":"x","max_tokens":1}\x00trailing', "application/json", 400),
        ("text_plain", b'{"prompt":"x","max_tokens":1}', "text/plain", 415),
        ("wrong_type", b'{"prompt":"x","max_tokens":"many"}', "application/json", 400),
        ("too_many_seqs", json.dumps({"prompt": ["a"] * 40, "n": 128, "max_tokens": 1}).encode(),
         "application/json", 400),
        ("huge_stop", json.dumps({"prompt": "x", "stop": ["s"] * 40}).encode(), "application/json", 400),
    ]

    def do_malformed(self, rng):
        choice = rng.randrange(len(self.MALFORMED) + 4)
        if choice < len(self.MALFORMED):
            name, body, ctype, want = self.MALFORMED[choice]
            c = self.conn(60)
            try:
                c.request("POST", "/v1/completions", body, {"Authorization": "Bearer " + rng.choice(KEYS),
                                                            "Content-Type": ctype})
                r = c.getresponse()
                r.read()
                status = r.status
            finally:
                c.close()
        elif choice == len(self.MALFORMED):
            name, want = "wrong_key", 401
            c = self.conn(60)
            try:
                c.request("POST", "/v1/completions", b'{"prompt":"x"}', {"Authorization": "Bearer nope",
                                                                       "Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                status = r.status
            finally:
                c.close()
        elif choice == len(self.MALFORMED) + 1:
            name, want = "unknown_route", 404
            status = self.get("/v2/nothing")[0]
        else:
            # Raw framing errors: gzip transfer coding (501) or a truncated body then EOF (no answer).
            name = "gzip_te" if choice == len(self.MALFORMED) + 2 else "truncated"
            s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
            try:
                if name == "gzip_te":
                    want = 501
                    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n")
                    status = int(s.recv(64).split(b" ")[1])
                else:
                    want = status = "eof"
                    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Content-Length: 100\r\n\r\n{\"prompt\":")
            finally:
                s.close()
        self.count("malformed_" + name, status)
        if status != want:
            self.bad(f"malformed {name}: status {status}, expected {want}")

    def worker(self, seed):
        rng = random.Random(seed)
        kinds = [self.do_stream] * 3 + [self.do_plain] * 3 + [self.do_cancel] * 2 + [self.do_malformed] * 2
        while not self.stop.is_set():
            fn = rng.choice(kinds)
            try:
                fn(rng)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                self.count(fn.__name__[3:], "exception")
                self.bad(f"{fn.__name__}: {type(e).__name__}: {e}")

    def sampler(self):
        next_rss = 0.0
        while not self.stop.is_set():
            t = time.time() - self.t0
            t1 = time.perf_counter()
            try:
                status, _ = self.get("/health", timeout=30)
                dt = time.perf_counter() - t1
                if status != 200:
                    self.bad(f"/health status {status}")
            except OSError as e:
                dt = time.perf_counter() - t1
                self.bad(f"/health: {e}")
            with self.lock:
                self.health.append((t, dt))
            if t >= next_rss:
                self.rss.append((t, self.rss_mib()))
                try:
                    self.rss_rest.append((t, self.rss_parts_mib()["rest"]))
                except OSError:
                    pass
                next_rss = t + self.args.rss_period
            self.stop.wait(self.args.health_period)

    def run(self):
        self.start_server()
        self.t0 = time.time()
        threads = [threading.Thread(target=self.worker, args=(i,), daemon=True) for i in range(self.args.workers)]
        threads.append(threading.Thread(target=self.sampler, daemon=True))
        for t in threads:
            t.start()
        last_print = 0
        while time.time() - self.t0 < self.args.duration:
            time.sleep(1)
            if self.proc.poll() is not None:
                self.bad(f"the server exited with {self.proc.returncode}")
                break
            el = time.time() - self.t0
            if el - last_print >= 60:
                last_print = el
                with self.lock:
                    n = sum(sum(v.values()) for v in self.counts.values())
                    h = [d for _, d in self.health[-60:]]
                print(f"soak: {el:.0f}s, {n} requests, rss {self.rss[-1][1] if self.rss else 0:.1f} MiB, "
                      f"health p99 (last min) {percentile(h, 99) * 1000:.1f} ms, unexpected {len(self.unexpected)}",
                      flush=True)
        self.stop.set()
        for t in threads:
            t.join(timeout=330)
        return self.finish()

    def finish(self):
        # Traffic has stopped: every sequence must end and every KV block be free again.
        deadline = time.time() + 60
        running = waiting = None
        while time.time() < deadline:
            running = self.metric("pagoda:num_requests_running")
            waiting = self.metric("pagoda:num_requests_waiting")
            if not running and not waiting:
                break
            time.sleep(0.5)
        time.sleep(0.5)
        blocks = self.metric("pagoda:kv_cache_blocks")
        free = self.metric("pagoda:kv_cache_free_blocks")
        usage = self.metric("pagoda:kv_cache_usage_perc")
        final_rss = self.rss_mib()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = None
        after = [(t, v) for t, v in self.rss if t >= self.args.warmup]
        rest_after = [(t, v) for t, v in self.rss_rest if t >= self.args.warmup]
        h_all = [d for _, d in self.health]
        windows = {}
        for t, d in self.health:
            windows.setdefault(int(t // 300), []).append(d)
        report = {
            "command": " ".join(self.cmd[:8]) + " --api-key x100 ...",
            "duration_s": round(time.time() - self.t0, 1),
            "workers": self.args.workers,
            "requests": self.counts,
            "requests_total": sum(sum(v.values()) for v in self.counts.values()),
            "rss_mib": {"start": round(self.rss[0][1], 1) if self.rss else None,
                        "at_warmup_end": round(after[0][1], 1) if after else None,
                        "end": round(final_rss, 1), "max": round(max(v for _, v in self.rss), 1) if self.rss else None,
                        "slope_after_warmup_mib_per_hour": round(slope_per_hour(after), 2),
                        "samples_after_warmup": len(after),
                        "heap_and_small_anon_at_warmup_end": round(rest_after[0][1], 1) if rest_after else None,
                        "heap_and_small_anon_end": round(rest_after[-1][1], 1) if rest_after else None,
                        "heap_and_small_anon_slope_after_warmup_mib_per_hour": round(slope_per_hour(rest_after), 2)},
            "kv_end": {"blocks": blocks, "free_blocks": free, "usage": usage, "running": running, "waiting": waiting,
                       "all_free": blocks is not None and blocks == free and not running and not waiting},
            "health_ms": {"samples": len(h_all), "p50": round(percentile(h_all, 50) * 1000, 2),
                          "p99": round(percentile(h_all, 99) * 1000, 2), "max": round(max(h_all) * 1000, 2) if h_all else None,
                          "p99_per_5min": [round(percentile(v, 99) * 1000, 2) for _, v in sorted(windows.items())]},
            "server_exit_code": rc,
            "unexpected": self.unexpected,
            "server_log": self.log.name,
        }
        return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "pagoda"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--duration", type=float, default=1800)
    ap.add_argument("--warmup", type=float, default=300)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--health-period", type=float, default=0.5)
    ap.add_argument("--rss-period", type=float, default=10)
    ap.add_argument("--json", help="write the report here too")
    ap.add_argument("serve_args", nargs="*", help="extra `pagoda serve` arguments (after --)")
    args = ap.parse_args()
    report = Soak(args).run()
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    ok = report["kv_end"]["all_free"] and not report["unexpected"] and report["server_exit_code"] == 0
    print("soak: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
