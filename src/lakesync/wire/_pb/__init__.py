"""Generated protobuf code (``make proto``); do not edit. Private to :mod:`lakesync.wire`."""
