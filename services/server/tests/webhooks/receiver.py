"""A webhook receiver for Baton's tests that trusts only what it can verify.

Every POST is checked with the Standard Webhooks library from PyPI (`standardwebhooks`, not
Baton's own code) against each secret listed in the secrets file (one per line, re-read
for every request), and logged as one JSON line: the `webhook-id`, the body's `type` once
verified (and, verified or not, the type and run id the body claims), the indices of the
secrets that verified it, and the status answered. It answers 204 when a
secret verified the request, 401 when none did, and 503 while the `down` file exists
(before verifying: a receiver that is down reads nothing).

    python receiver.py --dir DIR     # DIR holds `secrets`, `down`; `log` is written there

It prints `listening <port>` once it serves on 127.0.0.1.
"""

import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

LOCK = threading.Lock()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    secrets_path = os.path.join(args.dir, "secrets")
    down_path = os.path.join(args.dir, "down")
    log_path = os.path.join(args.dir, "log")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            entry = {"id": headers.get("webhook-id"), "path": self.path}
            # What the body says, verified or not: what arrived, whatever was answered.
            try:
                claimed = json.loads(body)
                entry["body_type"] = claimed.get("type")
                entry["run"] = ((claimed.get("data") or {}).get("run") or {}).get("id")
            except (ValueError, AttributeError):
                pass
            if os.path.exists(down_path):
                status = 503
                entry["verified_by"] = []
            else:
                secrets = []
                if os.path.exists(secrets_path):
                    with open(secrets_path) as f:
                        secrets = [line.strip() for line in f if line.strip()]
                verified = []
                payload = None
                for i, secret in enumerate(secrets):
                    try:
                        payload = Webhook(secret).verify(body, headers)
                        verified.append(i)
                    except WebhookVerificationError:
                        pass
                entry["verified_by"] = verified
                entry["type"] = payload.get("type") if isinstance(payload, dict) else None
                status = 204 if verified else 401
            entry["status"] = status
            with LOCK, open(log_path, "a") as f:
                f.write(json.dumps(entry) + "\n")
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
