def _get_device_index(device, optional=False):
    if isinstance(device, int):
        return device
    return int(str(device).rsplit(":", 1)[-1])
