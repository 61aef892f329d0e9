"""Test helper: what a private (``_p``) run's DMA streams may share, and with whom."""

from sim.engine.events import DMA_KINDS


def assert_private_streams(run, core: int) -> None:
    """A ``_p`` run on ``core`` sees no other core: every event is the core's, no DMA touches a shared region,
    and a DMA lost cycles to sharing only while another stream of the same core overlapped its own (the core's
    engines share its private regions' bandwidth with each other, and with nothing else)."""
    dma = [e for e in run.events if e.kind in DMA_KINDS]
    assert dma and {e.core for e in run.events} == {core}
    shared = {r.name for r in run.target.regions if r.shared}
    assert not shared & {r for e in dma for r in (e.src_region, e.dst_region)}
    assert not [e for e in run.events if e.kind == "barrier_wait"]
    for e in dma:
        if e.wait_cycles:
            assert any(o is not e and o.wait_start < e.end and e.wait_start < o.end for o in dma), e
