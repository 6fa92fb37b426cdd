# Prints how many SMs this client may use: under MPS the active thread
# percentage shows as a smaller multiprocessor count.
import torch
print(torch.cuda.get_device_properties(0).multi_processor_count)
