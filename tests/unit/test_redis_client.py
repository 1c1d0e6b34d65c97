"""A caller cancelled while it awaits a Redis command stops at once (the command finishes in
the background), and the connection keeps serving the next commands correctly."""

from __future__ import annotations

import asyncio

from orleanspy._util.redis import RedisClient, redact, split_prefix


async def test_a_cancelled_caller_stops_at_once_and_the_client_goes_on(redis_url: str) -> None:
    client = RedisClient(redis_url)
    await client.open()
    key = client.key("cancel-probe")
    try:
        await client.run(client.redis.set(key, b"v"))
        for delay in (0.0, 0.0005, 0.001, 0.002):
            async def reader() -> None:
                while True:
                    assert await client.run(client.redis.get(key)) == b"v"

            task = asyncio.ensure_future(reader())
            await asyncio.sleep(delay)
            task.cancel()
            done, _ = await asyncio.wait([task], timeout=2.0)
            assert done, "a cancelled caller was left hanging in a Redis command"
        assert await client.run(client.redis.get(key)) == b"v"  # replies still match
    finally:
        await client.run(client.redis.delete(key))
        await client.close()


async def test_closing_while_a_given_up_command_connects_leaves_no_socket_open(
    redis_url: str,
) -> None:
    """A caller that gave up while its command was still connecting, then closed the client
    (a client shutting down in the middle of a membership read): no connection of the pool
    stays open once the command is done."""
    client = RedisClient(redis_url)
    pool = client.redis.connection_pool
    task = asyncio.ensure_future(client.run(client.redis.ping()))
    await asyncio.sleep(0)  # the command has started connecting
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await client.close()
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if others:  # the background command, if any is left, ends
        await asyncio.wait(others, timeout=5)
    connections = [*pool._available_connections, *pool._in_use_connections]
    assert not [c for c in connections if c.is_connected]


def test_urls_keep_their_prefix_and_hide_their_password() -> None:
    assert split_prefix("redis://h:1/2?prefix=p") == ("redis://h:1/2", "p")
    assert split_prefix("redis://h:1/2") == ("redis://h:1/2", "orleanspy")
    assert redact("redis://u:secret@h:1/0") == "redis://u:***@h:1/0"


async def test_a_redis_membership_table_lists_the_clusters_it_holds(redis_url: str) -> None:
    from orleanspy.cluster.membership.redis import RedisMembershipTable

    tables = [RedisMembershipTable(redis_url, c) for c in ("blue", "red")]
    try:
        for table in tables:
            await table.read_all()  # makes the cluster's version
        assert await tables[0].cluster_ids() == ["blue", "red"]
    finally:
        for table in tables:
            await table.close()
