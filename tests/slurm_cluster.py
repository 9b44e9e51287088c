"""A real single-node SLURM cluster for tests: munged, slurmctld and slurmd on 127.0.0.1 with their own state, spool,
logs and ports under one directory, and a slurm.conf that the client commands find through $SLURM_CONF.

Debian's slurm-wlm and munge (`apt-get install -y slurm-wlm munge`, as root: slurmd starts jobs as their users).
No cgroups (proctrack/pgid, task/none), so it runs in a container. cred_expire=5 (the shortest allowed) because a
requeued job may not start again before its old credential expires (120 s by default), and sched_interval=2 because
a requeued job whose begin time has come waits for the next full scheduling pass (every 60 s by default).
"""
import os
import secrets
import shutil
import socket
import subprocess
import time

import portpicker

DAEMONS = ("munged", "slurmctld", "slurmd")


def missing() -> str | None:
  """Why no cluster can start here, or None."""
  for d in DAEMONS:
    if not shutil.which(d) and not os.path.exists(f"/usr/sbin/{d}"):
      return f"{d} is not installed (apt-get install -y slurm-wlm munge)"
  if os.geteuid() != 0:
    return "slurmd must run as root"
  return None


def _bin(name):
  return shutil.which(name) or f"/usr/sbin/{name}"


class Cluster:
  def __init__(self, base: str, cpus: int | None = None):
    self.base, self.procs = base, []
    cpus = cpus or min(2, os.cpu_count() or 1)  # more than the machine has would drain the node
    self.host = socket.gethostname().split(".")[0]
    os.makedirs(base, mode=0o700, exist_ok=True)
    for d in ("state", "spool", "munge"):
      os.makedirs(os.path.join(base, d), mode=0o700, exist_ok=True)
    self.sock = os.path.join(base, "munge", "munge.sock")
    key = os.path.join(base, "munge", "munge.key")
    with open(key, "wb") as f:
      f.write(secrets.token_bytes(1024))
    os.chmod(key, 0o600)
    self.conf = os.path.join(base, "slurm.conf")
    ctld_port, slurmd_port = portpicker.pick_unused_port(), portpicker.pick_unused_port()
    b = base
    with open(self.conf, "w") as f:
      f.write(f"""ClusterName=resnormtest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.sock},cred_expire=5
StateSaveLocation={b}/state
SlurmdSpoolDir={b}/spool
SlurmctldPidFile={b}/slurmctld.pid
SlurmdPidFile={b}/slurmd.pid
SlurmctldLogFile={b}/slurmctld.log
SlurmdLogFile={b}/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=600
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")
    self.env = {**os.environ, "SLURM_CONF": self.conf}

  def start(self, timeout: float = 60) -> None:
    m = os.path.join(self.base, "munge")
    self._spawn([_bin("munged"), "-F", "-f", f"--socket={self.sock}", f"--key-file={m}/munge.key",
                 f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"], "munged")
    self._wait(lambda: os.path.exists(self.sock), timeout, "munged")
    self._spawn([_bin("slurmctld"), "-D", "-i", "-f", self.conf], "slurmctld")
    self._wait(lambda: self._ok(["scontrol", "ping"], "UP"), timeout, "slurmctld")
    self._spawn([_bin("slurmd"), "-D", "-f", self.conf, "-N", self.host], "slurmd")
    self._wait(lambda: self._ok(["sinfo", "-h", "-o", "%T"], "idle"), timeout, "slurmd")

  def _spawn(self, cmd, name):
    out = open(os.path.join(self.base, f"{name}.out"), "w")
    self.procs.append((name, subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT)))

  def _ok(self, cmd, word) -> bool:
    r = subprocess.run(cmd, env=self.env, capture_output=True, text=True)
    return r.returncode == 0 and word in r.stdout

  def _wait(self, cond, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
      if cond():
        return
      for name, p in self.procs:
        if p.poll() is not None:
          raise RuntimeError(f"{name} exited {p.returncode}: {self.logs()}")
      time.sleep(0.2)
    raise RuntimeError(f"{what} not up after {timeout}s: {self.logs()}")

  def logs(self) -> str:
    out = []
    for name in ("munge/munged.log", "slurmctld.log", "slurmd.log", "munged.out", "slurmctld.out", "slurmd.out"):
      path = os.path.join(self.base, name)
      if os.path.exists(path):
        out.append(f"--- {name}\n" + open(path, errors="replace").read()[-1500:])
    return "\n".join(out)

  def run(self, *cmd) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=60)

  def stop(self) -> None:
    subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, capture_output=True)
    for _, p in reversed(self.procs):  # slurmd, slurmctld, then munged
      if p.poll() is None:
        p.terminate()
        try:
          p.wait(timeout=20)
        except subprocess.TimeoutExpired:
          p.kill()
          p.wait()
