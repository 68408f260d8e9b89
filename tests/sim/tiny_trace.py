"""A four-node, six-pod trace in the openb CSV format, for the packing tests."""

NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
n0,32000,131072,4,A
n1,32000,131072,4,A
n2,16000,65536,2,B
n3,8000,32768,0,
"""

PODS_CSV = """name,cpu_milli,memory_mib,num_gpu,gpu_milli
p0,4000,8192,1,1000
p1,2000,4096,1,500
p2,2000,4096,1,250
p3,8000,16384,2,1000
p4,1000,2048,0,0
p5,4000,8192,1,700
"""
