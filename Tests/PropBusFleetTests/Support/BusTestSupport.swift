// The private test bus (TestBus) and onQueue, for every file of this target.
@_exported import BusTestSupport
