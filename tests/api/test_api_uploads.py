"""Storage is bounded by who asks (issue 37 #3): a wallet's unclaimed uploads by its quota, a
node's by its leases and its hourly allowance, everyone's by the service's capacity; an upload
nothing names expires, and the upload GC deletes its blob."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy.orm import Session, sessionmaker

from orchestrator.config import Settings
from orchestrator.db import blobs as blob_db
from orchestrator.main import create_app
from orchestrator.services.blobs import collect_expired
from protocol.client import Wallet
from tests.api.conftest import ADMIN_KEY
from tests.clients import LiveNode, VirtualClock, join, make_wallet
from tests.conftest import JobMaker

TTL_S = 600.0
GRACE_S = 100.0


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return Settings(database_url=db_url, data_dir=tmp_path, periodic_enabled=False,
                    json_logs=False, admin_key=SecretStr(ADMIN_KEY), pls_placement=False,
                    max_blob_bytes=2000, upload_ttl_s=TTL_S, wallet_upload_quota_bytes=3000,
                    upload_capacity_bytes=5000, node_upload_bytes_per_hour=4000,
                    node_upload_grace_s=GRACE_S)


@pytest.fixture
def client(settings: Settings, clock: VirtualClock) -> Iterator[TestClient]:
    with TestClient(create_app(settings, clock=clock)) as test_client:
        yield test_client


@pytest.fixture
def new_wallet(client: TestClient, settings: Settings, clock: VirtualClock
               ) -> Callable[[], Wallet]:
    return lambda: make_wallet(client, clock, chain_id=settings.chain_id,
                               orchestrator_id=settings.orchestrator_id)


@pytest.fixture
def factory(client: TestClient) -> sessionmaker[Session]:
    return client.app.state.ctx.factory  # type: ignore[attr-defined, no-any-return]


def blob(size: int, tag: str) -> tuple[str, bytes]:
    data = (tag.encode() * size)[:size]
    return hashlib.sha256(data).hexdigest(), data


def put(wallet: Wallet, size: int, tag: str) -> tuple[int, str, dict[str, object]]:
    """A wallet's signed upload of `size` bytes: (status, sha256, error body or {})."""
    sha, data = blob(size, tag)
    path = f"/v1/blobs/{sha}"
    response = wallet.http.put(path, content=data, headers=wallet.signed_headers("PUT", path))
    return response.status_code, sha, response.json() if response.status_code != 200 else {}


def node_put(node: LiveNode, data: bytes) -> tuple[int, str, str]:
    sha = hashlib.sha256(data).hexdigest()
    response = node.client.put(f"/v1/blobs/{sha}", content=data, headers=node.auth)
    code = "" if response.status_code == 200 else response.json()["error"]["code"]
    return response.status_code, sha, code


def gc(client: TestClient) -> list[str]:
    ctx = client.app.state.ctx  # type: ignore[attr-defined]
    with ctx.factory.begin() as session:
        return collect_expired(session, store=ctx.blobs, now=ctx.now())


def stored(client: TestClient, factory: sessionmaker[Session], sha: str) -> bool:
    with factory() as session:
        row = blob_db.get_blob(session, sha256=sha)
    file = client.app.state.ctx.blobs.exists(sha)  # type: ignore[attr-defined]
    assert (row is not None) == file, "the database and the store disagree"
    return file


def test_an_unknown_key_stores_nothing_that_outlives_a_short_expiry(
        client: TestClient, new_wallet: Callable[[], Wallet], factory: sessionmaker[Session],
        clock: VirtualClock) -> None:
    stranger = new_wallet()  # never funded, staked or registered
    status, sha, _ = put(stranger, 1500, "junk")
    assert status == 200 and stored(client, factory, sha)
    clock.advance(TTL_S - 1)
    assert gc(client) == [] and stored(client, factory, sha)
    clock.advance(2)
    assert gc(client) == [sha]
    assert not stored(client, factory, sha)
    assert gc(client) == []


def test_a_wallet_over_its_quota_is_told_when_to_retry_and_others_are_not_held_up(
        client: TestClient, new_wallet: Callable[[], Wallet], clock: VirtualClock) -> None:
    heavy, other = new_wallet(), new_wallet()
    assert put(heavy, 1500, "a")[0] == 200
    clock.advance(60)
    assert put(heavy, 1500, "b")[0] == 200
    status, _, body = put(heavy, 10, "c")
    assert status == 429 and body["error"]["code"] == "upload_quota"  # type: ignore[index]
    path = f"/v1/blobs/{blob(10, 'c')[0]}"
    refused = heavy.http.put(path, content=blob(10, "c")[1],
                             headers=heavy.signed_headers("PUT", path))
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) == TTL_S - 60  # when the first one expires
    assert put(other, 1500, "d")[0] == 200
    clock.advance(TTL_S - 60)
    assert put(heavy, 10, "c")[0] == 200  # the first upload expired: room again


def test_the_services_capacity_for_unclaimed_uploads_is_shared_and_bounded(
        client: TestClient, new_wallet: Callable[[], Wallet]) -> None:
    statuses = [put(new_wallet(), 2000, f"w{index}") for index in range(3)]
    assert [s[0] for s in statuses] == [200, 200, 429]
    assert statuses[2][2]["error"]["code"] == "upload_capacity"  # type: ignore[index]


def test_a_node_uploads_only_while_it_holds_a_lease_and_within_its_hourly_allowance(
        client: TestClient, new_wallet: Callable[[], Wallet], make_job: JobMaker,
        clock: VirtualClock) -> None:
    node = join(new_wallet(), "gpu-1")
    assert node_put(node, b"no lease yet")[::2] == (403, "upload_not_leased")
    make_job(1)
    task_id = node.post("/v1/nodes/gpu-1/lease").json()["task_id"]
    assert node_put(node, b"x" * 1900)[0] == 200
    assert node_put(node, b"y" * 1900)[0] == 200
    assert node_put(node, b"z" * 1900)[::2] == (429, "upload_rate")
    node.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.5})
    assert node.post(f"/v1/tasks/{task_id}/fail", {"reason": "drain"}).status_code == 200
    clock.advance(GRACE_S - 1)  # just after the lease: the chunks of a network cut
    assert node_put(node, b"late chunk")[0] == 200
    clock.advance(2)
    assert node_put(node, b"long after")[::2] == (403, "upload_not_leased")


def test_what_a_checkpoint_names_is_kept_and_what_nothing_names_is_deleted(
        client: TestClient, new_wallet: Callable[[], Wallet], make_job: JobMaker,
        factory: sessionmaker[Session], clock: VirtualClock) -> None:
    node = join(new_wallet(), "gpu-1")
    make_job(1)
    task_id = node.post("/v1/nodes/gpu-1/lease").json()["task_id"]
    node.post(f"/v1/tasks/{task_id}/progress", {"progress": 0.1})
    _, chunk, _ = node_put(node, b"samples 0-63")
    _, stray, _ = node_put(node, b"a chunk never named")
    _, manifest, _ = node_put(node, json.dumps({"chunks": [{"sha256": chunk}]}).encode())
    assert node.post(f"/v1/tasks/{task_id}/checkpoints",
                     {"sha256": manifest, "progress": 0.5}).status_code == 200
    clock.advance(TTL_S + 1)
    assert gc(client) == [stray]
    assert [stored(client, factory, sha) for sha in (chunk, manifest, stray)] == [
        True, True, False]


def lacking(wallet: Wallet, hashes: list[str]) -> tuple[int, object]:
    response = wallet.send("POST", "/v1/blobs/lacking", {"sha256s": hashes})
    return response.status_code, response.json()


def test_a_wallet_is_told_which_blobs_of_a_pack_it_has_still_to_upload(
        client: TestClient, new_wallet: Callable[[], Wallet], clock: VirtualClock) -> None:
    """The question `mesh job submit` asks before it uploads a pack (issue 35): only what this
    wallet holds counts (another's upload of the same bytes does not prove possession), an
    expired upload is lacking again, and the question is signed and bounded."""
    artist, other = new_wallet(), new_wallet()
    (texture, _), (library, _) = blob(100, "texture"), blob(200, "library")
    assert lacking(artist, [texture, library, texture]) == (200, {
        "lacking": sorted([texture, library])})
    assert put(artist, 100, "texture")[0] == 200
    assert lacking(artist, [texture, library]) == (200, {"lacking": [library]})
    assert lacking(other, [texture]) == (200, {"lacking": [texture]})
    clock.advance(TTL_S + 1)
    gc(client)
    assert lacking(artist, [texture]) == (200, {"lacking": [texture]})

    unsigned = client.post("/v1/blobs/lacking", json={"sha256s": [texture]})
    assert unsigned.status_code == 401
    status, body = lacking(artist, [texture] * 513)
    assert status == 422 and "sha256s" in json.dumps(body)
    assert lacking(artist, ["not-a-hash"])[0] == 422
    huge = client.post("/v1/blobs/lacking", content=b"x" * 70_000,
                       headers={"content-type": "application/json"})
    assert huge.status_code == 413  # under /v1/blobs/, only a PUT streams past the body limit
