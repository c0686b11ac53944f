#!/usr/bin/env python3
"""Verifies one webhook request with the `standardwebhooks` package from PyPI: an
implementation of the Standard Webhooks spec that shares nothing with ours.

Reads one JSON object from stdin:
    {"secret": "whsec_...", "headers": {"webhook-id": ..., ...}, "body": "..."}
Exit status:
    0  verified; stdout holds the payload as the library parsed it (JSON)
    1  the library refused the request (stderr says why)
    2  the input was unusable or the library failed in another way
    3  the package is not installed: run `pip install standardwebhooks`
"""

import json
import sys

try:
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError
except ImportError as e:
    print(f"cannot import standardwebhooks ({e}): run `pip install standardwebhooks`", file=sys.stderr)
    sys.exit(3)


def main() -> int:
    try:
        request = json.load(sys.stdin)
        webhook = Webhook(request["secret"])
    except Exception as e:  # noqa: BLE001 - any failure here is a broken test, not a verdict
        print(f"unusable input: {e!r}", file=sys.stderr)
        return 2
    try:
        payload = webhook.verify(request["body"], request["headers"])
    except WebhookVerificationError as e:
        print(f"verification failed: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001
        print(f"the library failed: {e!r}", file=sys.stderr)
        return 2
    json.dump(payload, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
