import asyncio, gc, time, sys
_gc_start = [0.0]
def _gccb(phase, info):
    if phase == "start": _gc_start[0] = time.perf_counter()
    else:
        d = (time.perf_counter() - _gc_start[0]) * 1000
        if d > 2: print(f"GC gen{info['generation']} {d:.1f} ms at {time.time():.3f}", file=sys.stderr, flush=True)
gc.callbacks.append(_gccb)
async def lag():
    while True:
        t = time.perf_counter()
        await asyncio.sleep(0.002)
        d = (time.perf_counter() - t) * 1000 - 2
        if d > 8: print(f"LOOP LAG {d:.1f} ms at {time.time():.3f}", file=sys.stderr, flush=True)
