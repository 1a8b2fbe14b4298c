#!/usr/bin/env python3
"""guess_rate.py: how fast one address can guess a job's token on phubd (issue 38).

Starts phubd (--token-file) from BUILD, then CONNECTIONS threads on 127.0.0.9 each say Hello
with a random token proof as fast as phubd answers, for SECONDS, and prints the refusals per
second. Speaks the wire by hand (no protobuf module needed): PROTOCOL 4 reads the Challenge
first and sends a token_proof; 3 (a build from before issue 38) sends job_token in clear, so
the same script measures before and after:

  bench/tenants/guess_rate.py --build build --seconds 30
  bench/tenants/guess_rate.py --build ../baseline/build --protocol 3 --seconds 10
"""
import argparse
import os
import socket
import struct
import subprocess
import tempfile
import threading
import time


def varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, wire_type, payload):
    key = varint(num << 3 | wire_type)
    return key + (varint(payload) if wire_type == 0 else varint(len(payload)) + payload)


def hello_frame(proof, protocol):
    tensor = field(1, 2, b"w") + field(2, 0, 1000)
    hello = (field(1, 0, protocol) + field(3, 0, 0) + field(4, 0, 1) + field(5, 2, tensor)
             + field(9, 2, b"victim") + field(13 if protocol >= 4 else 2, 2, proof))
    message = field(1, 2, hello)
    return struct.pack("<I", len(message)) + message


def read_frame(sock):
    length = struct.unpack("<I", sock.recv(4, socket.MSG_WAITALL))[0]
    return sock.recv(length, socket.MSG_WAITALL)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--protocol", type=int, default=4)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        token, port_file = os.path.join(tmp, "token"), os.path.join(tmp, "port")
        with open(token, "w") as f:
            f.write("correct-horse-battery\n")
        phubd = subprocess.Popen([os.path.join(a.build, "phub/server/phubd"), "--port", "0",
                                  "--port-file", port_file, "--no-pin", "--listen", "127.0.0.1",
                                  "--token-file", token], stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 20
            while not (os.path.exists(port_file) and open(port_file).read().strip()):
                if time.time() > deadline or phubd.poll() is not None:
                    raise SystemExit("guess_rate.py: phubd did not start")
                time.sleep(0.05)
            port = int(open(port_file).read())
            refused, stop = [0], time.time() + a.seconds

            def guesser():
                while time.time() < stop:
                    try:
                        with socket.socket() as s:
                            s.bind(("127.0.0.9", 0))
                            s.settimeout(10)
                            s.connect(("127.0.0.1", port))
                            if a.protocol >= 4:
                                read_frame(s)  # the Challenge
                            s.sendall(hello_frame(os.urandom(32), a.protocol))
                            read_frame(s)  # the refusal
                            refused[0] += 1
                    except OSError:
                        time.sleep(0.01)

            threads = [threading.Thread(target=guesser) for _ in range(a.connections)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            print(f"protocol {a.protocol}: {refused[0]} refused guesses in {a.seconds:g} s from one "
                  f"address over {a.connections} connections: {refused[0] / a.seconds:.1f} per second")
        finally:
            phubd.terminate()
            phubd.wait()


if __name__ == "__main__":
    main()
