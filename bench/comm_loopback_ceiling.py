# Loopback TCP ceiling for bench/results/comm_allreduce.md: one stream, 256 MiB, 4 MiB writes.
# Run with /usr/bin/python3 bench/comm_loopback_ceiling.py
import socket, os, time
N=256<<20; buf=b'x'*(4<<20)
s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(1); port=s.getsockname()[1]
if os.fork()==0:
    c=socket.create_connection(('127.0.0.1',port)); sent=0
    while sent<N: sent+=c.send(buf)
    c.close(); os._exit(0)
a,_=s.accept(); got=0; t=time.time(); mv=bytearray(4<<20)
while True:
    r=a.recv_into(mv)
    if not r: break
    got+=r
dt=time.time()-t; print("loopback single stream %.2f GB/s"%(got/dt/1e9))
