"""The Redis fixture gives a real, writable redis-server."""

import redis


def test_redis_round_trip(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set("media-usage:probe", "1")
    assert client.get("media-usage:probe") == b"1"
    assert client.info("server")["redis_version"]
    client.close()
