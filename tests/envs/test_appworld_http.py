"""The lite world over AppWorld's HTTP protocol: server and client agree with the in-process backend."""
import json
import threading
import time
import urllib.request

import pytest

from envs import make_env
from envs.appworld.client import AppWorldServerError, RemoteClient, ServerPool
from envs.appworld.lite.backend import LiteBackend
from envs.appworld.lite.tasks import PRELUDE, load_task
from envs.appworld.server import serve_in_thread
from tests.helpers import free_port


@pytest.fixture()
def server_url():
    server, url = serve_in_thread()
    yield url
    server.shutdown()
    server.server_close()


def test_http_and_in_process_backends_agree(server_url):
    task_id = "wallet_settle_requests_1"
    cells = [PRELUDE, "print(me['first_name'], sorted(passwords))",
             'print(all_pages(apis.wallet.show_payment_requests, access_token=tokens["wallet"], status="pending"))',
             "apis.wallet.show_balance(access_token='bad')", load_task(task_id).solution[1]]
    results = []
    for client in (LiteBackend(), RemoteClient(server_url, timeout_s=30)):
        task = client.initialize(task_id, "agree")
        seen = [client.task_completed(task_id), client.evaluate(task_id)]
        seen += [client.execute(task_id, cell) for cell in cells]
        seen += [client.task_completed(task_id), client.evaluate(task_id)]
        client.close(task_id)
        results.append((task, seen))
    (local_task, local), (remote_task, remote) = results
    assert remote_task == json.loads(json.dumps(local_task)) and remote_task["instruction"]
    assert remote == local
    assert local[-1]["success"] and not local[1]["success"] and "401" in local[5]


def test_replies_are_wrapped_and_errors_are_http_errors(server_url):
    def post(endpoint, body):
        request = urllib.request.Request(server_url + endpoint, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    assert post("/initialize", {"task_id": "notes_tag_count_1", "experiment_name": "x"})["output"]["supervisor"]
    assert post("/execute", {"task_id": "notes_tag_count_1", "code": "print(1 + 1)"}) == {"output": "2"}
    assert post("/task_completed", {"task_id": "notes_tag_count_1"}) == {"output": False}
    assert post("/close", {"task_id": "notes_tag_count_1"}) == {"output": None}
    client = RemoteClient(server_url, retries=2, backoff_s=0.01)
    with pytest.raises(AppWorldServerError, match="HTTP 422"):
        client.initialize("no_such_task_1")
    with pytest.raises(AppWorldServerError, match="HTTP 422"):
        client.execute("notes_tag_count_1", "print(1)")  # closed: unknown task


def test_client_retries_until_the_server_is_up():
    port = free_port()
    holder = {}

    def start_later():
        time.sleep(0.5)
        holder["server"], _ = serve_in_thread(port)

    threading.Thread(target=start_later).start()
    client = RemoteClient(f"http://127.0.0.1:{port}", retries=5, backoff_s=0.2)
    try:
        assert client.initialize("notes_tag_count_2")["task_id"] == "notes_tag_count_2"
    finally:
        time.sleep(0.6)
        holder["server"].shutdown()
        holder["server"].server_close()
    with pytest.raises(AppWorldServerError, match="unreachable"):
        RemoteClient(f"http://127.0.0.1:{free_port()}", retries=1, backoff_s=0.01).initialize("notes_tag_count_2")


def test_remote_env_over_the_lite_server_solves_a_task_and_returns_its_server(server_url):
    env = make_env("appworld", max_turns=3, backend="remote", url=server_url)
    row = {"id": "music_liked_genre_2"}
    prompt = env.reset(row)[0]["content"]
    assert load_task(row["id"]).instruction in prompt
    for cell in load_task(row["id"]).solution:
        result = env.step(f"```python\n{cell}\n```")
    assert result.done and result.score == 1.0 and env.episode_record()["success"]
    env.reset(row)  # the server was given back at the end of the episode: a new one can start at once
    env.close()


def test_server_pool_hands_out_each_server_to_one_episode_at_a_time():
    pool = ServerPool(["http://a", "http://b"])
    first, second = pool.acquire(), pool.acquire()
    assert {first, second} == {"http://a", "http://b"}
    with pytest.raises(AppWorldServerError, match="no AppWorld server became free"):
        pool.acquire(timeout_s=0.1)
    threading.Timer(0.2, pool.release, [first]).start()
    assert pool.acquire(timeout_s=5) == first


def test_ranks_split_the_servers_between_them():
    from envs.appworld.client import rank_share
    urls = ["u0", "u1", "u2", "u3"]
    assert rank_share(urls, 0, 1) == urls
    assert rank_share(urls, 0, 2) == ["u0", "u2"] and rank_share(urls, 1, 2) == ["u1", "u3"]
    with pytest.raises(AppWorldServerError, match="give each rank its own"):
        rank_share(urls[:1], 0, 2)
