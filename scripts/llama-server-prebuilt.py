#!/usr/bin/env python3
"""llama.cpp's llama-server from the prebuilt `xllamacpp` wheel, with llama-server's flags.

`scripts/install-llama.sh` installs this wherever the CPU has what the wheel was built for
(AVX2, FMA, F16C, BMI2), so a fresh machine serves in seconds instead of building llama.cpp
for 6-28 minutes. The wheel embeds llama-server's own HTTP
server; this script only maps the flags `scripts/start-llama.sh` passes onto its
parameters and keeps the process alive. An unknown flag is an error, never ignored.
"""
import signal
import sys
import threading

import xllamacpp


# llama-server's flags that take a number, and the parameter each sets.
INT_FLAGS = {
    "--port": "port",
    "-np": "n_parallel",
    "--parallel": "n_parallel",
    "-c": "n_ctx",
    "--ctx-size": "n_ctx",
    "--cache-ram": "cache_ram_mib",
    "-b": "n_batch",
    "--batch-size": "n_batch",
    "-ub": "n_ubatch",
    "--ubatch-size": "n_ubatch",
}


def parse(argv):
    """llama-server's flags as start-llama.sh uses them -> xllamacpp.CommonParams."""
    p = xllamacpp.CommonParams()
    p.ui = False
    threads = None
    args = list(argv)
    flags = {"--swa-full": "swa_full", "--no-webui": None, "--metrics": "endpoint_metrics"}
    while args:
        a = args.pop(0)
        if a in flags:
            if flags[a]:
                setattr(p, flags[a], True)
            continue
        if not args:
            sys.exit(f"llama-server-prebuilt: {a} needs a value")
        v = args.pop(0)
        if a in ("-m", "--model"):
            p.model.path = v
        elif a == "--chat-template-file":
            with open(v, encoding="utf-8") as f:
                p.chat_template = f.read()
            p.use_jinja = True
        elif a in ("-a", "--alias"):
            p.model_alias = {v}
        elif a == "--host":
            p.hostnames = [v]
        elif a in INT_FLAGS:
            setattr(p, INT_FLAGS[a], int(v))
        elif a in ("-t", "--threads"):
            threads = int(v)
        else:
            sys.exit(f"llama-server-prebuilt: flag {a} is not mapped (see {__file__})")
    if threads is not None:
        p.cpuparams.n_threads = threads
        p.cpuparams_batch.n_threads = threads
    return p


def main():
    params = parse(sys.argv[1:])
    server = xllamacpp.Server(params)
    print(f"llama-server-prebuilt: listening on {server.listening_address}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()


if __name__ == "__main__":
    main()
