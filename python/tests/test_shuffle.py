"""Shuffles from Python against a real cluster: writers push, readers get each committed piece
once as a read-only memoryview, a losing attempt is refused."""

import pytest

import blockmgr


def piece(map_id, partition, size=3000):
    return bytes((map_id * 31 + partition * 7 + i) % 251 for i in range(size))


def test_every_committed_piece_is_read_once(client):
    layout = client.register_shuffle(21, maps=3, partitions=4, level="MEMORY_ONLY")
    assert layout["maps"] == 3 and len(layout["primaries"]) == 4
    for map_id in range(3):
        writer = client.shuffle_writer(21, map_id)
        for partition in range(4):
            writer.write(partition, piece(map_id, partition))
        writer.commit()
    for partition in range(4):
        reader = client.shuffle_reader(21, partition)
        got = {}

        def visit(map_id, view):
            assert isinstance(view, memoryview) and view.readonly
            got[map_id] = got.get(map_id, b"") + bytes(view)

        reader.for_each(visit)
        assert got == {m: piece(m, partition) for m in range(3)}
        assert bytes(client.shuffle_reader(21, partition).read_all()) == b"".join(
            piece(m, partition) for m in range(3))
    [listed] = [s for s in client.shuffles() if s["shuffle_id"] == 21]
    assert listed["committed_maps"] == 3
    client.unregister_shuffle(21)
    assert all(s["shuffle_id"] != 21 for s in client.shuffles())


def test_a_second_attempt_is_aborted_and_a_view_does_not_outlive_its_call(client):
    client.register_shuffle(22, maps=1, partitions=1)
    first = client.shuffle_writer(22, 0, attempt=1)
    first.write(0, b"winner")
    first.commit()
    late = client.shuffle_writer(22, 0, attempt=0)
    late.write(0, b"loser")
    with pytest.raises(blockmgr.Aborted):
        late.commit()
    kept = []
    client.shuffle_reader(22, 0).for_each(lambda map_id, view: kept.append(view))
    with pytest.raises(ValueError):
        bytes(kept[0])  # released once its call returned
    assert bytes(client.shuffle_reader(22, 0).read_all()) == b"winner"
    client.unregister_shuffle(22)


def test_an_exception_in_the_function_stops_the_read(client):
    client.register_shuffle(23, maps=1, partitions=1)
    writer = client.shuffle_writer(23, 0)
    writer.write(0, b"x")
    writer.commit()

    def fail(map_id, view):
        raise KeyError("stop")

    with pytest.raises(KeyError):
        client.shuffle_reader(23, 0).for_each(fail)
    client.unregister_shuffle(23)
