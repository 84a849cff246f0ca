// The private test bus (TestBus), eventually and onQueue, for every file of this target.
@_exported import BusTestSupport
