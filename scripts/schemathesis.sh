#!/usr/bin/env bash
# Runs schemathesis (PyPI) against a running PartyFlow server and its own OpenAPI
# document (/v1/openapi.json): no answer may be a 5xx, and every answer must match
# the document (status, content type, headers, body schema).
#
#   PARTYFLOW_BASE_URL=http://127.0.0.1:3000 \
#   PARTYFLOW_API_KEY=pfk_… PARTYFLOW_PROJECT=spc_… scripts/schemathesis.sh
#   scripts/schemathesis.sh --install    # only install it (what `./dev test` does)
#
# Every check schemathesis has runs, with negative_data_rejection off in the stateful
# phase only (see below) and two exceptions made per operation (see `exceptions`):
# positive_data_acceptance where a valid request depends on
# state or on a rule JSON Schema cannot say, and ensure_resource_availability on the
# delete and revoke operations pinned to spare IDs.
#
# Optional:
#   PARTYFLOW_BOT_TOKEN        a bot token, so the Bot API is called authenticated
#   SCHEMATHESIS_MAX_EXAMPLES  test cases per operation and phase (default 25)
#   SCHEMATHESIS_CHECKS        a comma-separated list instead of every check
#   SCHEMATHESIS_SEED          a seed, to replay a run
#   SCHEMATHESIS_REPORT_DIR    write JUnit and NDJSON reports (every request and answer) there
#   PARTYFLOW_CACHE            where the virtualenv lives (default ~/.cache/partyflow)
#
# The run creates, changes and deletes data in the project, so it only talks to a
# server on loopback. Before it starts, it lists the project's destinations, events,
# deliveries, channels, incoming webhooks and bots and pins one real ID of each into
# the operations that read or change them, so their 200 answers are checked too, not
# only 404s; it makes a spare API key, bot, destination, channel and incoming webhook
# for the revoke and delete operations, which are pinned to those (schemathesis reuses
# IDs it has seen in answers, and would otherwise revoke its own API key); and it makes
# an incoming webhook whose real URL the sender operation is pinned to.
set -euo pipefail

# Pinned, from PyPI: the same checks on every machine.
version=4.32.5
cache=${PARTYFLOW_CACHE:-$HOME/.cache/partyflow}
venv=$cache/venv
if [[ $("$venv/bin/schemathesis" --version 2>/dev/null) != "schemathesis, version $version" ]]; then
    echo "schemathesis.sh: installing schemathesis $version (PyPI) into $venv" >&2
    mkdir -p "$cache"
    [[ -x $venv/bin/python ]] || python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
fi
if [[ ${1:-} == --install ]]; then
    exit 0
fi

base=${PARTYFLOW_BASE_URL:?set PARTYFLOW_BASE_URL, e.g. http://127.0.0.1:3000}
: "${PARTYFLOW_API_KEY:?set PARTYFLOW_API_KEY}"
: "${PARTYFLOW_PROJECT:?set PARTYFLOW_PROJECT (spc_…)}"
base=${base%/}

if ! [[ $base =~ ^http://(127\.[0-9]+\.[0-9]+\.[0-9]+|localhost|\[::1\])(:[0-9]+)?$ ]]; then
    echo "schemathesis.sh: refusing $base: only a server on loopback (http://127.x.x.x, localhost, [::1])" >&2
    exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PARTYFLOW_BASE_URL=$base

# The configuration: the project and the credentials (read from the environment by
# schemathesis itself, so they appear in no command line), and the pinned IDs.
"$venv/bin/python" - "$work/schemathesis.toml" <<'PY'
import json
import os
import sys
import urllib.request

base = os.environ["PARTYFLOW_BASE_URL"]
project = os.environ["PARTYFLOW_PROJECT"]


def call(method, path, body=None):
    request = urllib.request.Request(
        f"{base}/v1/projects/{project}/{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {os.environ['PARTYFLOW_API_KEY']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def first_id(resource, query=""):
    data = call("GET", f"{resource}?limit=1{query}")["data"]
    return data[0]["id"] if data else None


succeeded = first_id("deliveries", "&status=succeeded") or first_id("deliveries")
failed = first_id("deliveries", "&status=failed") or succeeded
waiting = first_id("deliveries", "&status=retrying") or first_id("deliveries", "&status=pending") or failed
destination = first_id("destinations")
channel = first_id("channels")
webhook = first_id("incoming-webhooks")
# Operations that only read, or change what can be changed back, pinned to real IDs.
pins = [
    ("getDestination", "id", destination),
    ("updateDestination", "id", destination),
    ("enableDestination", "id", destination),
    ("disableDestination", "id", destination),
    ("rotateDestinationSecret", "id", destination),
    ("getEvent", "id", first_id("events")),
    ("getDelivery", "id", succeeded),
    ("listDeliveryAttempts", "id", failed),
    ("resendDelivery", "id", failed),
    ("cancelDelivery", "id", waiting),
    ("getChannel", "id", channel),
    ("listChannelMessages", "id", channel),
    ("postChannelMessage", "id", channel),
    ("postBotMessage", "channel_id", channel),
    ("getIncomingWebhook", "id", webhook),
    ("enableIncomingWebhook", "id", webhook),
    ("disableIncomingWebhook", "id", webhook),
    ("getBot", "id", first_id("bots")),
    ("markNotificationRead", "id", first_id("notifications")),
]

lines = [
    "[parameters]",
    '"path.project" = "${PARTYFLOW_PROJECT}"',
    "",
    "[auth.openapi.ApiKeyAuth]",
    'bearer = "${PARTYFLOW_API_KEY}"',
    "",
]
# In the stateful phase a step's path parameters come from the links (a name or ID an
# earlier answer gave), and schemathesis 4.32 may still count such a step as the
# negative case it was generated as, though the link replaced the one invalid part
# with a valid value (schemathesis issue #2983): a valid PATCH answered 200 was
# reported as "schema-violating request accepted". The other three phases still run
# negative_data_rejection on every operation.
lines += ["[phases.stateful.checks.negative_data_rejection]", "enabled = false", ""]
if os.environ.get("PARTYFLOW_BOT_TOKEN"):
    lines += ["[auth.openapi.BotTokenAuth]", 'api_key = "Bot ${PARTYFLOW_BOT_TOKEN}"', ""]

tag = os.urandom(4).hex()
channel = channel or call("POST", "channels", {"name": f"schemathesis {tag}"})["id"]
spares = {
    "revokeApiKey": call("POST", "api-keys", {"name": f"schemathesis spare {tag}"})["id"],
    "revokeBot": call("POST", "bots", {"name": f"schemathesis spare {tag}"})["id"],
    "deleteDestination": call(
        "POST", "destinations", {"url": "http://127.0.0.1:9/spare", "eventTypes": [f"schemathesis.spare.{tag}"]}
    )["id"],
    "deleteIncomingWebhook": call(
        "POST", "incoming-webhooks", {"channelId": channel, "name": f"schemathesis spare {tag}"}
    )["id"],
    # Deleting a channel takes its messages and incoming webhooks with it.
    "deleteChannel": call("POST", "channels", {"name": f"schemathesis spare {tag}"})["id"],
}
pins += [(operation, "id", spare) for operation, spare in spares.items()]
# Senders post to an unsigned webhook of the run's own, with its real token.
hook = call("POST", "incoming-webhooks", {"channelId": channel, "name": f"schemathesis sender {tag}"})
pins += [("postIncomingWebhookMessage", "webhook_id", hook["id"]), ("postIncomingWebhookMessage", "token", hook["token"])]
by_operation = {}
for operation, name, value in pins:
    if value is not None:
        by_operation.setdefault(operation, []).append(f'"path.{name}" = {json.dumps(value)}')
for operation, values in by_operation.items():
    lines += [
        "[[operations]]",
        f'include-operation-id = "{operation}"',
        f"parameters = {{ {', '.join(values)} }}",
        "",
    ]

# The checks each operation skips, and why. Everything else runs everywhere.
exceptions = {
    "positive_data_acceptance": (
        # A cursor is valid only if this listing gave it (422 `invalid_cursor` otherwise).
        ["listDestinations", "listEvents", "listDeliveries", "listChannels", "listChannelMessages",
         "listIncomingWebhooks", "listBots", "listApiKeys", "listNotifications", "listEventTypes"]
        # The same, and `since`/`until` must read as times (RFC 3339 or Unix ms).
        + ["listAuditLog"]
        # `transformation` must compile as jq, `retryPolicy.initialMs` may not exceed `maxMs`.
        + ["createDestination", "updateDestination"]
        # `channelId` must be a channel of the project.
        + ["createIncomingWebhook"]
        # `deliverAt` may be at most 30 days ahead of the moment of the call.
        + ["publishEvent"]
        # `schema` must be a valid JSON Schema (draft 2020-12) and `example` must match it.
        + ["createEventType", "updateEventType"]
        # `since` and `until` must read as times (RFC 3339 or Unix ms), `until` not before `since`.
        + ["resendFailedDeliveries", "previewResendFailedDeliveries"]
        # `retention` must read as a duration (`30d`, `1d 12h`) from 1 s to 3650 days.
        + ["updateProject"]
    ),
    # Pinned to spare IDs (above), so a link from a create call never reaches the new resource.
    "ensure_resource_availability": [
        "deleteDestination", "deleteIncomingWebhook", "deleteChannel", "revokeApiKey", "revokeBot"
    ],
}
for check, operations in exceptions.items():
    for operation in operations:
        lines += [
            "[[operations]]",
            f'include-operation-id = "{operation}"',
            f"checks.{check}.enabled = false",
            "",
        ]

with open(sys.argv[1], "w") as out:
    out.write("\n".join(lines))
PY

# Every check by default (schemathesis's own default); a `--checks` option would
# override the exceptions above.
extra=()
if [[ -n ${SCHEMATHESIS_CHECKS:-} ]]; then
    extra+=(--checks "$SCHEMATHESIS_CHECKS")
fi
if [[ -n ${SCHEMATHESIS_SEED:-} ]]; then
    extra+=(--seed "$SCHEMATHESIS_SEED")
fi
if [[ -n ${SCHEMATHESIS_REPORT_DIR:-} ]]; then
    mkdir -p "$SCHEMATHESIS_REPORT_DIR"
    extra+=(--report junit,ndjson --report-dir "$(cd "$SCHEMATHESIS_REPORT_DIR" && pwd)")
fi

cd "$work"
"$venv/bin/schemathesis" --config-file "$work/schemathesis.toml" run "$base/v1/openapi.json" \
    --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-25}" \
    --generation-database none \
    --request-timeout 20 \
    --wait-for-schema 30 \
    --no-color \
    "${extra[@]}"
