"""`mesh agent run`: a provider's machine on the grid.

The agent joins (`agent.presence`: register, login naming the session key of
`agent.connection`, heartbeats, telemetry, probes, the PoPW handshake, progress shown after a
network cut), then loops: it delivers the results left in the spool (`agent.delivery`), pulls a
lease and runs its task in the sandbox (`agent.worker`), and runs a re-check of another
provider's result when no lease waits for it, or first when `CheckPacing` says one is due: a
customer waits on a frame, while a re-check only gates a settlement. Network and server
errors are retried with capped exponential backoff.
SIGTERM drains: no new leases, the running frame stops after its next checkpoint and is handed
back (`fail(drain)`), the orchestrator is told (`POST .../drain`), then the agent exits.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable

import httpx
from eth_account.signers.local import LocalAccount

from agent.config import AgentConfig
from agent.connection import Connection
from agent.delivery import Delivery
from agent.presence import Presence
from agent.sandbox import isolation
from agent.spool import Spool
from agent.worker import Worker
from protocol.client import ApiCallError

log = logging.getLogger("mesh.agent")


class CheckPacing:
    """When re-checks go before the node's own leases: once `every_s` has passed since the
    node last asked for one (a pull that found no lease asks too), so re-checks are not
    starved on a grid that always has a frame for this node."""

    def __init__(self, every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self.clock = clock
        self.asked_at = clock()

    def due(self) -> bool:
        return self.clock() - self.asked_at >= self.every_s

    def asked(self) -> None:
        self.asked_at = self.clock()


class Agent:
    """The provider `account`'s node of `config`, its parts wired to one connection and one
    spool."""

    def __init__(self, config: AgentConfig, account: LocalAccount) -> None:
        self.config = config
        self.connection = Connection(config, account)
        spool = Spool(config.state_dir / "spool")
        self.draining = threading.Event()
        self.presence = Presence(config, self.connection, spool)
        self.delivery = Delivery(self.connection, spool)
        self.worker = Worker(config, self.connection, spool, self.delivery, self.draining)

    def run(self) -> int:
        """Serve until drained (SIGTERM) or idle past `exit_when_idle_s`; returns tasks done."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: self.begin_drain())
        log.info("agent %s for node %s at %s", self.connection.wallet.address,
                 self.config.node_id, self.config.orchestrator)
        log.info("sandbox: %s", isolation())
        self.presence.join()
        self.worker.warm()
        node, session = self.config.node_id, self.connection.session
        idle_since = time.monotonic()
        pacing = CheckPacing(self.config.check_every_s)
        try:
            while not self.draining.is_set():
                self.delivery.deliver_spooled()
                if pacing.due():
                    pacing.asked()
                    if self.worker.run_check():
                        idle_since = time.monotonic()
                        continue
                lease = self.connection.retry("pull a lease", lambda: session.request(
                    "POST", f"/v1/nodes/{node}/lease", ok=(200, 204)))
                if lease.status_code == 204:
                    pacing.asked()
                    if self.worker.run_check():
                        idle_since = time.monotonic()
                        continue
                    limit = self.config.exit_when_idle_s
                    if limit is not None and time.monotonic() - idle_since > limit:
                        log.info("idle for %.0f s: leaving", limit)
                        break
                    self.draining.wait(self.config.poll_s)
                    continue
                self.worker.work(lease.json())
                idle_since = time.monotonic()
        finally:
            self.leave()
        return self.delivery.tasks_done

    def begin_drain(self) -> None:
        if self.draining.is_set():
            return
        log.info("SIGTERM: draining (no new leases; the running frame checkpoints and goes "
                 "back)")
        self.draining.set()

    def leave(self) -> None:
        if self.draining.is_set():
            try:
                self.connection.session.request("POST", f"/v1/nodes/{self.config.node_id}/drain")
                log.info("drained: the orchestrator was told")
            except (httpx.TransportError, ApiCallError) as exc:
                log.warning("drain: could not tell the orchestrator: %s", exc)
        self.worker.close()
        self.presence.leave()
        self.connection.close()
