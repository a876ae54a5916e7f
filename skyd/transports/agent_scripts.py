"""Scripts run on pool hosts with ``python3 -c`` (Python >= 3.8, stdlib only).

Layout on a host (``~`` is the login user's home):
  ~/.skyd/agent-<sha256>.pyz          the agent zipapp, one file per version (content hash)
  ~/.skyd/nodes/<cluster>-<rank>/     the node dir = the agent's --home: agent.json (0600),
                                      agent.sha, agent.log, agent.crt/agent.key/ca.crt (0600),
                                      the job queue sqlite, workdir/
"""

from __future__ import annotations

from skyd.fsutil import REMOTE_SRC

#: prefix of the credentials written for the next start (ENSURE_AGENT puts them in place)
STAGED = ".next-"

_COMMON = r"""
import json, os, signal, subprocess, sys, time
def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True
def info(nd):
    try:
        with open(os.path.join(nd, "agent.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def running_pid(nd):
    i = info(nd)
    if i and alive(int(i["pid"])):
        return int(i["pid"])
    return 0
def stop(nd, grace=10.0):
    pid = running_pid(nd)
    if not pid:
        return False
    os.kill(pid, signal.SIGTERM)
    end = time.time() + grace
    while time.time() < end and alive(pid):
        time.sleep(0.05)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
    return True
def session_pids(sid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    fields = f.read().rsplit(")", 1)[-1].split()
                if int(fields[3]) == sid:
                    out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out
"""

# argv: node_dir pyz sha listen rank cluster credential-file-name... The credentials were
# written as .next-<name>: a kept agent keeps its own (the staged ones are removed), a
# started one gets them.
ENSURE_AGENT = _COMMON + r"""
nd, pyz, sha, listen, rank, cluster = sys.argv[1:7]
creds = sys.argv[7:]
def drop_staged():
    for c in creds:
        try:
            os.remove(os.path.join(nd, ".next-" + c))
        except OSError:
            pass
state = "started"
def cur_sha():
    try:
        with open(os.path.join(nd, "agent.sha")) as f:
            return f.read().strip()
    except OSError:
        return ""
pid = running_pid(nd)
if pid and cur_sha() == sha:
    drop_staged()
    i = info(nd); i["state"] = "running"; print(json.dumps(i)); sys.exit(0)
if pid:
    stop(nd)  # other version: upgrade over the same home (the job queue stays in nd)
    state = "upgraded"
for name in ("agent.json", "token"):  # token: an older version's cluster secret
    try:
        os.remove(os.path.join(nd, name))
    except OSError:
        pass
for c in creds:
    os.replace(os.path.join(nd, ".next-" + c), os.path.join(nd, c))
with open(os.path.join(nd, "agent.sha"), "w") as f:
    f.write(sha + "\n")
log = open(os.path.join(nd, "agent.log"), "ab")
cmd = [sys.executable, pyz, "--home", nd, "--listen", listen, "--node-rank", rank,
       "--cluster", cluster]
p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                     start_new_session=True, close_fds=True, cwd=nd)
end = time.time() + 30
while time.time() < end:
    i = info(nd)
    if i and int(i.get("pid", 0)) == p.pid:
        i["state"] = state; print(json.dumps(i)); sys.exit(0)
    if p.poll() is not None:
        break
    time.sleep(0.01)
if p.poll() is None:
    p.kill()
with open(os.path.join(nd, "agent.log"), "rb") as f:
    sys.stderr.write(f.read()[-2000:].decode("utf-8", "replace"))
sys.exit(3)
"""

# argv: node_dir... -> one line per node dir: "running <sha>" | "stopped" (on purpose: `skyd
# stop` or autostop wrote stopped.json) | "dead" (agent gone without being stopped: crash,
# kill -9, reboot) | "terminated" (no node dir)
STATUS = _COMMON + r"""
for nd in sys.argv[1:]:
    if not os.path.isdir(nd):
        print("terminated")
    elif running_pid(nd):
        try:
            with open(os.path.join(nd, "agent.sha")) as f:
                sha = f.read().strip()
        except OSError:
            sha = "-"
        print("running " + sha)
    elif os.path.exists(os.path.join(nd, "stopped.json")):
        print("stopped")
    else:
        print("dead")
"""

# argv: node_dir -> stop the agent and mark the node stopped on purpose
STOP = _COMMON + r"""
nd = sys.argv[1]
was = stop(nd)
if os.path.isdir(nd) and not os.path.exists(os.path.join(nd, "stopped.json")):
    with open(os.path.join(nd, "stopped.json.tmp"), "w") as f:
        f.write(json.dumps({"stopped_at": time.time(), "down": False}))
    os.replace(os.path.join(nd, "stopped.json.tmp"), os.path.join(nd, "stopped.json"))
print("stopped" if was else "not-running")
"""

# argv: node_dir base_dir sha -> stop the agent and everything in its session, remove files;
# zipapps no remaining node dir uses are removed too. The node dir is removed only if it lies
# inside base/nodes (skyd.fsutil's safe_rmtree, the same code as on the daemon's machine).
TERMINATE = _COMMON + REMOTE_SRC + r"""
nd, base, sha = sys.argv[1:4]
try:
    confined_target(nd, os.path.join(base, "nodes"))
except ValueError as e:
    sys.stderr.write("skyd: %s\n" % e)
    sys.exit(4)
pid = running_pid(nd)
if pid:
    stop(nd, grace=5.0)
    for p in session_pids(pid):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
nodes = os.path.join(base, "nodes")
safe_rmtree(nd, nodes)
in_use = set()
if os.path.isdir(nodes):
    for d in os.listdir(nodes):
        try:
            with open(os.path.join(nodes, d, "agent.sha")) as f:
                in_use.add(f.read().strip())
        except OSError:
            pass
for name in os.listdir(base) if os.path.isdir(base) else []:
    # this version's zipapp and older ones (left by upgrades) that no node dir uses
    if name.startswith("agent-") and name.endswith(".pyz") and name[6:-4] not in in_use:
        try:
            os.remove(os.path.join(base, name))
        except OSError:
            pass
for d in (nodes, base):
    try:
        os.rmdir(d)
    except OSError:
        pass
print("removed")
"""
