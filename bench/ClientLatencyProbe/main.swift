// The PropBusClient observer of bench/client-latency.sh: the same changes as the plain libdbus
// observer (bench/ref/watch-latency.c), seen through a property's `values`.
//
//   ClientLatencyProbe ADDRESS KEY COUNT
//
// Prints "ready" once the property delivered its current value (subscribed and read), then
// takes COUNT changes of the int32 KEY and prints "VALUE NANOSECONDS" for each
// (CLOCK_MONOTONIC when `values` yielded it), after the last one.
import Glibc
import PropBusClient

func now() -> Int64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
}

let arguments = CommandLine.arguments
guard arguments.count == 4, let count = Int(arguments[3]) else {
    print("usage: ClientLatencyProbe ADDRESS KEY COUNT")
    exit(64)
}
let client = try await PropBusClient.connect(.address(arguments[1]))
let property = client.property(arguments[2], as: Int32.self)
var seen: [(Int32, Int64)] = []
seen.reserveCapacity(count)
var first = true
for await value in property.values {
    if first {
        first = false
        print("ready")
        fflush(nil)  // every stream: stdout itself is a global Swift 6 will not touch
        continue
    }
    seen.append((value, now()))
    if seen.count == count { break }
}
for (value, time) in seen { print("\(value) \(time)") }
let reads = 1_000_000
var total: Int64 = 0
let start = now()
for _ in 0..<reads { total &+= Int64(property.current ?? 0) }
let elapsed = now() - start
// `total` is printed so the reads cannot be optimized away.
print("cached-read \(Double(elapsed) / Double(reads)) \(total)")
client.close()
