import Foundation

/// Consumes an async sequence in the background and keeps what it yielded, for a test to read
/// from anywhere (e.g. a ``PropBusClient`` property's `values` or `states`).
final class StreamRecorder<Element: Sendable>: @unchecked Sendable {
    // @unchecked: `received` is only touched under `lock`.
    private let lock = NSLock()
    private var received: [Element] = []
    private var task: Task<Void, Never>?

    init<S: AsyncSequence & Sendable>(_ sequence: S) where S.Element == Element {
        task = Task { [weak self] in
            do {
                for try await element in sequence {
                    guard let self else { return }
                    self.append(element)
                }
            } catch {}
        }
    }

    deinit { task?.cancel() }

    private func append(_ element: Element) {
        lock.lock()
        received.append(element)
        lock.unlock()
    }

    var elements: [Element] {
        lock.lock()
        defer { lock.unlock() }
        return received
    }

    /// Waits until `condition` holds for what arrived so far (at most `timeout` seconds);
    /// returns it either way.
    @discardableResult
    func wait(timeout: TimeInterval = 10, until condition: ([Element]) -> Bool) async -> [Element] {
        _ = await eventually(timeout: timeout) { condition(elements) }
        return elements
    }
}
