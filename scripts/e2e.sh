#!/usr/bin/env bash
# End to end with the release binary, as a user and as a pod would see it:
#   1. the README's first start: no auth configured → a token file is written and its path
#      logged; curl /mcp with it (initialize, tools/list, bash echo hi); a wrong token → 401;
#      a foreign Host → 403; a restart reuses the token;
#   2. reverse attach against a websocat stub pod whose every connection is played by a small
#      bash driver (initialize → tools/list → sys_info → bash echo e2e → a bash reply of
#      ~400 KB, which goes out fragmented and must arrive whole): the pod closing with
#      4010 ends the grant `revoked` after exactly one dial; closing with 1000 brings a redial,
#      and DELETE /attach/{id} then ends it `cancelled`. The first turn also runs a job:
#      bash_start, bash_poll with wait_secs (answered when the job prints), bash_cancel, and a
#      last poll that sees it killed;
#   3. approvals (issue 15): a grant with "approve":["bash"]; the pod's bash calls wait until the
#      CLI decides: `handnode approve` lets one run, `handnode deny --reason` refuses the other,
#      whose command (a touch) never runs.
# websocat cannot refuse a handshake, so handshake statuses are covered by the in-process stub
# pod of tests/attach.rs. Prints PASS/FAIL per step and "N passed, M failed"; exits non-zero
# on any failure. Every wait is bounded; every process started here is killed on exit.
#
# Env: HANDNODE_BIN (default: build target/release/handnode), HANDNODE_RUNNER (run it through
# this, e.g. qemu-aarch64-static), E2E_KEEP=1 keeps the temp dir.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/e2e-lib.sh
. "$root/scripts/e2e-lib.sh"

"$root/scripts/ci/e2e.sh" || { echo "FAIL: installing the e2e tools"; exit 1; }
websocat="$("$root/scripts/ci/e2e.sh" --websocat-path)"

release_binary "$root" || exit 1
scratch_dir e2e

# A clean environment for every process we start: nothing of the caller's handnode setup.
base_env=(env -i "PATH=$PATH" "HOME=$tmp/home" "RUST_LOG=${RUST_LOG:-debug}")
mkdir -p "$tmp/home"

# The owner profile's local tools, sorted, as a jq array: read from the binary's registry
# (`handnode tools`), never written down here.
owner_tools="$("${binc[@]}" tools --profile owner --json | jq -c '[.tools[].name] | sort')"
if [ -z "$owner_tools" ] || [ "$owner_tools" = "[]" ]; then
    echo "FAIL: handnode tools --profile owner --json listed nothing"
    exit 1
fi

# curl with a bound on every request. Prints the body, then the status on a line of its own.
http() {
    curl -sS --max-time 10 -w '\n%{http_code}' "$@"
}
status_of() { tail -n 1 <<<"$1"; }
body_of() { sed '$d' <<<"$1"; }

# ---------------------------------------------------------------------------------------
# 1. First start as the README has it.
echo "== first start: generated token file, /mcp with curl"
first="$tmp/first"
mkdir -p "$first"
if start_daemon "$first/log" "${base_env[@]}" "XDG_CONFIG_HOME=$first/config" \
    "XDG_STATE_HOME=$first/state" "${binc[@]}" --listen 127.0.0.1:0 --no-notify --no-sd-notify; then
    pass "daemon starts with no auth configured and logs its address ($daemon_url)"
else
    fail "daemon starts with no auth configured"
    summary
    exit 1
fi
check "GET /healthz → 200 ok" test "$(http "$daemon_url/healthz")" = "$(printf 'ok\n200')"
token_file="$first/config/handnode/token"
check "token file created at \$XDG_CONFIG_HOME/handnode/token" test -s "$token_file"
check "token file has mode 0600" test "$(stat -c %a "$token_file" 2>/dev/null)" = 600
check "the log names the token file's path" grep -qF "$token_file" "$first/log"
token="$(tr -d '[:space:]' <"$token_file" 2>/dev/null)"
check "the log never shows the token" bash -c '! grep -qF "$1" "$2"' _ "${token:-x}" "$first/log"
check "state dir created under \$XDG_STATE_HOME with mode 0700" \
    test "$(stat -c %a "$first/state/handnode" 2>/dev/null)" = 700

mcp_headers=(-H "Authorization: Bearer $token" -H 'Content-Type: application/json'
    -H 'Accept: application/json, text/event-stream')
init='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"0"}}}'
reply="$(http -D "$first/init.headers" "${mcp_headers[@]}" -d "$init" "$daemon_url/mcp")"
check_json "initialize → 200 handnode 2025-06-18 with instructions" "$(body_of "$reply")" \
    '.id == 1 and .result.serverInfo.name == "handnode" and .result.protocolVersion == "2025-06-18" and (.result.instructions | length > 0) and .result.capabilities.tools.listChanged == false'
check "initialize status 200" test "$(status_of "$reply")" = 200
session="$(sed -n 's/^[Mm][Cc][Pp]-[Ss]ession-[Ii][Dd]: *\([^[:space:]]*\).*/\1/p' "$first/init.headers")"
check "initialize issues an Mcp-Session-Id" test -n "$session"
sess=(-H "Mcp-Session-Id: $session" -H 'MCP-Protocol-Version: 2025-06-18')
reply="$(http "${mcp_headers[@]}" "${sess[@]}" \
    -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$daemon_url/mcp")"
check "notifications/initialized → 202 with no body" \
    test "$(status_of "$reply")" = 202 -a -z "$(body_of "$reply")"
reply="$(http "${mcp_headers[@]}" "${sess[@]}" \
    -d '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' "$daemon_url/mcp")"
check_json "tools/list → the owner's local tools, as \`handnode tools\` lists them" "$(body_of "$reply")" \
    "[.result.tools[].name] | sort == $owner_tools"
check_json "every tool carries all four annotations as booleans" "$(body_of "$reply")" \
    '[.result.tools[].annotations | [.readOnlyHint, .destructiveHint, .idempotentHint, .openWorldHint] | map(type == "boolean") | all] | all'
reply="$(http "${mcp_headers[@]}" "${sess[@]}" \
    -d '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo hi"}}}' \
    "$daemon_url/mcp")"
check_json "tools/call bash echo hi → hi" "$(body_of "$reply")" \
    '.id == 3 and .result.isError == false and (.result | .content[0].text[.structuredContent.stdout_range[0]:.structuredContent.stdout_range[1]]) == "hi\n" and (.result.content[0].text | startswith("hi"))'
# The README's own two curl lines: no session header, minimal initialize params.
readme=(-H "Authorization: Bearer $token" -H 'Content-Type: application/json')
reply="$(http "${readme[@]}" \
    -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}' \
    "$daemon_url/mcp")"
check_json "README: initialize with only protocolVersion" "$(body_of "$reply")" \
    '.result.serverInfo.name == "handnode"'
reply="$(http "${readme[@]}" \
    -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo hi"}}}' \
    "$daemon_url/mcp")"
check_json "README: tools/call bash echo hi without a session → hi" "$(body_of "$reply")" \
    '.id == 2 and (.result | .content[0].text[.structuredContent.stdout_range[0]:.structuredContent.stdout_range[1]]) == "hi\n"'
reply="$(http -H 'Authorization: Bearer not-the-token' -H 'Content-Type: application/json' \
    -d "$init" "$daemon_url/mcp")"
check "a wrong token → 401" test "$(status_of "$reply")" = 401
check_json "the 401 says unauthorized" "$(body_of "$reply")" '.error == "unauthorized"'
reply="$(http "${mcp_headers[@]}" -H 'Host: evil.example' -d "$init" "$daemon_url/mcp")"
check "a non-loopback Host → 403" test "$(status_of "$reply")" = 403
reply="$(http "${mcp_headers[@]}" -H 'Origin: http://evil.example' -d "$init" "$daemon_url/mcp")"
check "a foreign Origin → 403" test "$(status_of "$reply")" = 403
reply="$(http -X DELETE -H "Authorization: Bearer $token" -H "Mcp-Session-Id: $session" \
    "$daemon_url/mcp")"
check "DELETE /mcp ends the session → 204" test "$(status_of "$reply")" = 204
stop_pid "$daemon_pid"
check "SIGTERM → exit 0" test "$stop_status" = 0

if start_daemon "$first/log2" "${base_env[@]}" "XDG_CONFIG_HOME=$first/config" \
    "XDG_STATE_HOME=$first/state" "${binc[@]}" --listen 127.0.0.1:0 --no-notify --no-sd-notify; then
    check "a restart keeps the token file" test "$(tr -d '[:space:]' <"$token_file")" = "$token"
    reply="$(http "${mcp_headers[@]}" -d "$init" "$daemon_url/mcp")"
    check "the same token works after a restart" test "$(status_of "$reply")" = 200
    stop_pid "$daemon_pid"
    check "SIGTERM → exit 0 (restart)" test "$stop_status" = 0
else
    fail "the daemon starts again with its token file"
fi

# ---------------------------------------------------------------------------------------
# 2. Reverse attach against a websocat pod.

# The pod side of one connection, run by websocat for every accepted WebSocket: stdin holds
# handnode's frames one per line, stdout goes out as text frames. Results go to files in
# $POD_DIR; handnode closes (or the driver exits and websocat closes with its code).
cat >"$tmp/pod.sh" <<'POD'
#!/usr/bin/env bash
set -u
dir="$POD_DIR"
n=$(( $(cat "$dir/count" 2>/dev/null || echo 0) + 1 ))
echo "$n" >"$dir/count"
out="$dir/conn$n"
note() { printf '%s\n' "$*" >>"$out"; }
note "uri ${WEBSOCAT_URI:-}"
note "auth ${H_Authorization:-}"
send() { printf '%s\n' "$1"; }
# expect NAME JQ-FILTER: read one reply (bounded) into $last and note whether the filter holds.
last=""
expect() {
    local line
    if ! IFS= read -r -t 15 line; then note "FAIL $1: no reply within 15 s"; return 1; fi
    last="$line"
    if jq -e "$2" >/dev/null 2>&1 <<<"$line"; then note "PASS $1"; else note "FAIL $1: $line"; fi
}
send '{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"websocat-pod","version":"0"}}}'
expect "initialize" '.id == "init" and .result.serverInfo.name == "handnode" and .result.protocolVersion == "2025-06-18"'
send '{"jsonrpc":"2.0","method":"notifications/initialized"}'
if [ "$n" -eq 1 ]; then
    send '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
    expect "tools/list" "[.result.tools[].name] | sort == $OWNER_TOOLS"
    send '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sys_info","arguments":{}}}'
    expect "tools/call sys_info" '.id == 3 and .result.isError != true and (.result.structuredContent.hostname | type == "string")'
    send '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo e2e"}}}'
    expect "tools/call bash echo e2e" '.id == 4 and .result.isError == false and (.result | .content[0].text[.structuredContent.stdout_range[0]:.structuredContent.stdout_range[1]]) == "e2e\n"'
    # A reply over 64 KiB goes out as a fragmented message (frames of at most 64 KiB): it
    # must reach the pod as one whole message, here one line of about 400 KB.
    send '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"bash","arguments":{"command":"printf %0200000d 0","max_output_bytes":262144}}}'
    expect "a 400 KB reply (fragmented) arrives whole" '.id == 5 and .result.isError == false and ((.result | .content[0].text[.structuredContent.stdout_range[0]:.structuredContent.stdout_range[1]]) | length == 200000 and test("^0+$"))'
    # A job: its second line comes 0.3 s after the first, so the waiting poll is answered
    # by the output, well before its 10 s.
    send '{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"bash_start","arguments":{"command":"echo started; sleep 0.3; echo job-line; exec sleep 1000"}}}'
    expect "bash_start" '.id == 6 and .result.isError == false and .result.structuredContent.state == "running"'
    job="$(jq -r '.result.structuredContent.job_id' <<<"$last" 2>/dev/null)"
    send "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"bash_poll\",\"arguments\":{\"job_id\":\"$job\",\"stdout_offset\":8,\"wait_secs\":10}}}"
    asked=$(date +%s%N)
    expect "bash_poll wait_secs answers with the new line" '.id == 7 and (.result | .content[0].text[.structuredContent.stdout_range[0]:.structuredContent.stdout_range[1]]) == "job-line\n" and .result.structuredContent.state == "running"'
    waited_ms=$(( ($(date +%s%N) - asked) / 1000000 ))
    if [ "$waited_ms" -lt 5000 ]; then note "PASS bash_poll answered on output (${waited_ms} ms)"; else note "FAIL bash_poll waited ${waited_ms} ms"; fi
    send "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":{\"name\":\"bash_cancel\",\"arguments\":{\"job_id\":\"$job\"}}}"
    expect "bash_cancel" '.id == 8 and .result.isError == false and .result.structuredContent.signal == "TERM"'
    send "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":\"bash_poll\",\"arguments\":{\"job_id\":\"$job\",\"stdout_offset\":17,\"wait_secs\":10}}}"
    expect "bash_poll sees the job killed (cancelled)" '.id == 9 and .result.structuredContent.state == "killed" and .result.structuredContent.reason == "cancelled"'
    note "turn done"
    # Hold the socket until the script has looked at the grant, then leave: websocat closes
    # with its --close-status-code.
    for _ in $(seq 400); do [ -e "$dir/go" ] && break; sleep 0.05; done
    note "leaving"
    exit 0
fi
note "holding"
# Later connections stay until handnode closes them (EOF), bounded.
while IFS= read -r -t 30 _; do :; done
note "closed by handnode"
POD
chmod +x "$tmp/pod.sh"

# start_pod DIR CLOSE_CODE [DRIVER] : a websocat pod on a free port playing DRIVER (default
# pod.sh) on every connection; sets pod_port.
start_pod() {
    local dir="$1" code="$2" driver="${3:-$tmp/pod.sh}" port pid
    mkdir -p "$dir"
    for _ in $(seq 20); do
        port=$((20000 + RANDOM % 40000))
        # Skip ports something already answers on.
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
        # -B: messages up to 1 MiB (websocat's default is 64 KiB; a pod takes 16 MiB).
        POD_DIR="$dir" OWNER_TOOLS="$owner_tools" "$websocat" --header-to-env Authorization -q -t -E -e -B 1048576 \
            --close-status-code "$code" --close-reason e2e \
            "ws-l:127.0.0.1:$port" "sh-c:$driver" 2>"$dir/websocat.log" &
        pid=$!
        started_pids+=("$pid")
        # Listening, and it is our websocat that answers (it exits if the bind fails).
        if wait_until 10 bash -c '(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null || ! kill -0 "$2"' \
            _ "$port" "$pid" && kill -0 "$pid" 2>/dev/null; then
            pod_port="$port"
            return 0
        fi
    done
    return 1
}

conn_has() { grep -qF "$2" "$1" 2>/dev/null; }
count_is_at_least() { [ "$(cat "$1/count" 2>/dev/null || echo 0)" -ge "$2" ]; }

# Results the driver noted for one connection become steps here.
report_conn() {
    local file="$1" label="$2" line
    while IFS= read -r line; do
        case "$line" in
            PASS\ *) pass "$label: ${line#PASS }" ;;
            FAIL\ *) fail "$label: ${line#FAIL }" ;;
        esac
    done <"$file"
}

attach_token="e2e-admin-token-$RANDOM$RANDOM"
attach_secret="e2e-attach-secret-$RANDOM$RANDOM"
state="$tmp/attach-state"
if ! start_daemon "$tmp/attach.log" "${base_env[@]}" "HANDNODE_TOKEN=$attach_token" \
    "${binc[@]}" --listen 127.0.0.1:0 --state-dir "$state" --config-dir "$tmp/attach-config" \
    --no-notify --no-sd-notify --backoff-base-ms 100 --backoff-cap-ms 200; then
    fail "daemon starts with HANDNODE_TOKEN"
    summary
    exit 1
fi
pass "daemon starts with HANDNODE_TOKEN ($daemon_url)"
admin=(-H "Authorization: Bearer $attach_token" -H 'Content-Type: application/json')

grant_json() { body_of "$(http "${admin[@]}" "$daemon_url/attach/$1")"; }
grant_is() { [ "$(grant_json "$1" | jq -r "$2" 2>/dev/null)" = true ]; }

# scenario NAME CLOSE_CODE : attach, play one turn, leave with CLOSE_CODE. Sets grant_id, pod_dir.
scenario() {
    local name="$1" code="$2" reply
    pod_dir="$tmp/pod-$name"
    grant_id=""
    if ! start_pod "$pod_dir" "$code"; then
        fail "$name: websocat pod listens"
        return 1
    fi
    pass "$name: websocat pod listens on 127.0.0.1:$pod_port (closes with $code)"
    reply="$(http "${admin[@]}" -d "{\"runtime\":\"ws://127.0.0.1:$pod_port\",\"session\":\"$name\",\"profile\":\"owner\",\"secret\":\"$attach_secret\",\"ttl_secs\":600}" \
        "$daemon_url/attach")"
    check "$name: POST /attach → 202" test "$(status_of "$reply")" = 202
    check_json "$name: the grant JSON" "$(body_of "$reply")" \
        ".session == \"$name\" and .profile == \"owner\" and (.id | length == 36) and (has(\"secret\") | not)"
    grant_id="$(body_of "$reply" | jq -r .id 2>/dev/null)"
    if ! wait_until 20 conn_has "$pod_dir/conn1" "turn done"; then
        fail "$name: the pod's first turn finished within 20 s" "$(cat "$pod_dir/conn1" 2>/dev/null)"
        return 1
    fi
    report_conn "$pod_dir/conn1" "$name dial 1"
    check "$name: dialed /tools/attach/$name" conn_has "$pod_dir/conn1" "uri /tools/attach/$name"
    check "$name: dialed with Authorization: Bearer <the grant's secret>" \
        conn_has "$pod_dir/conn1" "auth Bearer $attach_secret"
    check_json "$name: GET /attach/{id} → attached, 7 calls, no job running" "$(grant_json "$grant_id")" \
        '.state == "attached" and .calls == 7 and .jobs == 0'
    touch "$pod_dir/go"
}

echo "== pod closes with 4010: the grant ends revoked after exactly one dial"
if scenario e2e-revoked 4010; then
    check "e2e-revoked: the grant ends with reason revoked" \
        wait_until 20 grant_is "$grant_id" '.state == "ended" and .ended == "revoked"'
    # The grant has ended; give a (wrong) redial with a 100 ms backoff ample time to show.
    sleep 1
    check "e2e-revoked: exactly one dial" test "$(cat "$pod_dir/count")" = 1
fi

echo "== pod closes with 1000: handnode redials; DELETE ends it"
if scenario e2e-redial 1000; then
    check "e2e-redial: a redial arrives" wait_until 20 count_is_at_least "$pod_dir" 2
    check "e2e-redial: the redial is served (initialize)" \
        wait_until 20 conn_has "$pod_dir/conn2" "PASS initialize"
    check "e2e-redial: redialed with the same secret" conn_has "$pod_dir/conn2" "auth Bearer $attach_secret"
    check "e2e-redial: attached again" wait_until 20 grant_is "$grant_id" '.state == "attached"'
    reply="$(http -X DELETE "${admin[@]}" "$daemon_url/attach/$grant_id")"
    check "e2e-redial: DELETE /attach/{id} → 204" test "$(status_of "$reply")" = 204
    check "e2e-redial: the pod sees the socket closed" \
        wait_until 10 conn_has "$pod_dir/conn2" "closed by handnode"
    check "e2e-redial: the grant ends cancelled" \
        grant_is "$grant_id" '.state == "ended" and .ended == "cancelled"'
    sleep 1
    check "e2e-redial: no dial after the revoke" test "$(cat "$pod_dir/count")" = 2
fi

# The pod side of the approvals scenario: two bash calls that wait for a person. Each reply
# may take as long as the script needs to decide (bounded at 30 s).
cat >"$tmp/pod-approve.sh" <<'POD'
#!/usr/bin/env bash
set -u
dir="$POD_DIR"
n=$(( $(cat "$dir/count" 2>/dev/null || echo 0) + 1 ))
echo "$n" >"$dir/count"
out="$dir/conn$n"
note() { printf '%s\n' "$*" >>"$out"; }
send() { printf '%s\n' "$1"; }
expect() {
    local line
    if ! IFS= read -r -t 30 line; then note "FAIL $1: no reply within 30 s"; return 1; fi
    if jq -e "$2" >/dev/null 2>&1 <<<"$line"; then note "PASS $1"; else note "FAIL $1: $line"; fi
}
send '{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"websocat-pod","version":"0"}}}'
expect "initialize" '.id == "init"'
if [ "$n" -eq 1 ]; then
    send '{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo approved-e2e"}}}'
    expect "the approved bash ran and answered" '.id == 10 and .result.isError == false and (.result | .content[0].text[.structuredContent.stdout_range[0]:.structuredContent.stdout_range[1]]) == "approved-e2e\n"'
    send "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/call\",\"params\":{\"name\":\"bash\",\"arguments\":{\"command\":\"touch $dir/denied-ran\"}}}"
    expect "the denied bash is answered isError, denied" '.id == 11 and .result.isError == true and (.result.content[0].text | test("^denied by token: not on this box; it did not run$"))'
    note "turn done"
fi
while IFS= read -r -t 30 _; do :; done
POD
chmod +x "$tmp/pod-approve.sh"

echo "== approvals: an approved and a denied bash, decided with the CLI"
cli=(timeout 20 env -i "PATH=$PATH" "HANDNODE_TOKEN=$attach_token" "${binc[@]}")
# The id of the one waiting call whose command is $1, or nothing.
waiting_id() {
    "${cli[@]}" approvals --json --url "$daemon_url" 2>/dev/null \
        | jq -r --arg c "$1" '.approvals[] | select(.arguments.command == $c) | .id' 2>/dev/null
}
has_waiting() { [ -n "$(waiting_id "$1")" ]; }
pod_dir="$tmp/pod-e2e-approve"
if start_pod "$pod_dir" 1000 "$tmp/pod-approve.sh"; then
    reply="$(http "${admin[@]}" -d "{\"runtime\":\"ws://127.0.0.1:$pod_port\",\"session\":\"e2e-approve\",\"profile\":\"desktop\",\"approve\":[\"bash\"],\"secret\":\"$attach_secret\",\"ttl_secs\":600}" \
        "$daemon_url/attach")"
    check "approvals: POST /attach with approve → 202" test "$(status_of "$reply")" = 202
    check_json "approvals: the grant JSON shows approve, and that mouse/key still reach the shell" \
        "$(body_of "$reply")" '.approve == ["bash"] and .shell == "yes" and .shell_because == "mouse is a shell tool" and .approved_for_grant == []'
    approve_grant="$(body_of "$reply" | jq -r .id 2>/dev/null)"
    if wait_until 20 has_waiting "echo approved-e2e"; then
        pass "approvals: handnode approvals lists the first bash call, its command in full"
        listing="$("${cli[@]}" approvals --url "$daemon_url" 2>&1)"
        check "approvals: the table shows the tool and the command" \
            bash -c 'grep -q "bash" <<<"$1" && grep -qF "echo approved-e2e" <<<"$1"' _ "$listing"
        out="$("${cli[@]}" approve "$(waiting_id "echo approved-e2e")" --url "$daemon_url" 2>&1)"
        check "approvals: handnode approve → allowed" grep -q "^allowed " <<<"$out"
    else
        fail "approvals: the first bash call waits for approval"
    fi
    if wait_until 20 has_waiting "touch $pod_dir/denied-ran"; then
        out="$("${cli[@]}" deny "$(waiting_id "touch $pod_dir/denied-ran")" --reason "not on this box" --url "$daemon_url" 2>&1)"
        check "approvals: handnode deny --reason → denied" grep -q "^denied " <<<"$out"
    else
        fail "approvals: the second bash call waits for approval"
    fi
    if wait_until 40 conn_has "$pod_dir/conn1" "turn done"; then
        report_conn "$pod_dir/conn1" "approvals pod"
    else
        fail "approvals: the pod's turn finished" "$(cat "$pod_dir/conn1" 2>/dev/null)"
    fi
    check "approvals: the denied command never ran" test ! -e "$pod_dir/denied-ran"
    out="$("${cli[@]}" approve "no-such-approval" --url "$daemon_url" 2>&1)"
    check "approvals: deciding an unknown id exits 1 and says so" \
        bash -c '[ "$1" = 1 ] && grep -q "unknown, already decided" <<<"$2"' _ "$(
            "${cli[@]}" approve no-such-approval --url "$daemon_url" >/dev/null 2>&1; echo $?)" "$out"
    decided() { [ "$(grep -c '"approval_decided"' "$state/audit.jsonl" 2>/dev/null)" -ge 2 ]; }
    check "approvals: audit.jsonl records both decisions" wait_until 10 decided
    # The call's own record follows its decision's through the audit writer: wait for it
    # the same way (under qemu or load it can land after the two decisions).
    not_approved() { grep -q '"outcome":"not_approved"' "$state/audit.jsonl" 2>/dev/null; }
    check "approvals: audit.jsonl records the denied call as not_approved" wait_until 10 not_approved
    reply="$(http -X DELETE "${admin[@]}" "$daemon_url/attach/$approve_grant")"
    check "approvals: DELETE the grant → 204" test "$(status_of "$reply")" = 204
else
    fail "approvals: websocat pod listens"
fi

echo "== what the daemon recorded"
metrics="$(body_of "$(http "${admin[@]}" "$daemon_url/metrics")")"
check "metrics count a close with 4010" grep -qE '^handnode_closes_total\{code="4010"\} [1-9]' <<<"$metrics"
check "metrics count a close with 1000" grep -qE '^handnode_closes_total\{code="1000"\} [1-9]' <<<"$metrics"
listing="$(timeout 20 env -i "PATH=$PATH" "HANDNODE_TOKEN=$attach_token" "${binc[@]}" grants --json --url "$daemon_url" 2>&1)"
check_json "handnode grants --json lists both ended grants" "$listing" \
    '[.grants[] | select(.state == "ended")] | length >= 2'
stop_pid "$daemon_pid"
check "SIGTERM → exit 0" test "$stop_status" = 0
audit="$state/audit.jsonl"
check "audit.jsonl records the tool calls under the grants" \
    test "$(grep -c '"tool_call"' "$audit" 2>/dev/null)" -ge 4
check "audit.jsonl records each job's start and end" \
    test "$(grep -c '"job_ended"' "$audit" 2>/dev/null)" -ge 2
check "no attach secret or admin token in the log, audit or grants.json after revoke" \
    bash -c '! grep -qF -e "$1" -e "$2" "$3" "$4" "$5"' _ \
    "$attach_secret" "$attach_token" "$tmp/attach.log" "$audit" "$state/grants.json"

summary
