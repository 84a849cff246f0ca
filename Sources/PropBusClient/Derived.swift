import Observation

/// Something whose value a view can follow: a ``Property``, or a ``Derived`` value made from
/// properties with ``ValueSource/map(_:)`` and ``combine(_:_:_:)``.
public protocol ValueSource<Value>: Sendable {
    /// The value's type.
    associatedtype Value: Sendable
    /// The value now, if known (no call).
    var current: Value? { get }
    /// The value first (once known), then every change.
    var values: AsyncStream<Value> { get }
}

extension Property: ValueSource {}

/// A value computed from other sources' latest values (ReactiveSwift's `map` and
/// `combineLatest`): ``current`` from theirs, ``values`` after every change of any of them,
/// once all of them have a value.
public final class Derived<Value: Sendable>: ValueSource {
    private let currentBody: @Sendable () -> Value?
    private let valuesBody: @Sendable () -> AsyncStream<Value>

    init(current: @escaping @Sendable () -> Value?, values: @escaping @Sendable () -> AsyncStream<Value>) {
        currentBody = current
        valuesBody = values
    }

    /// The value computed from the sources' cached values; `nil` until each has one.
    public var current: Value? { currentBody() }

    /// The value first (once every source has one), then after every change of a source.
    public var values: AsyncStream<Value> { valuesBody() }
}

extension ValueSource {
    /// `transform` of this source's value: `command.executing.map { !$0 }` is a spinner's
    /// `hidden`.
    public func map<T: Sendable>(_ transform: @escaping @Sendable (Value) -> T) -> Derived<T> {
        Derived(current: { current.map(transform) }, values: {
            let upstream = values
            return AsyncStream { continuation in
                let task = Task {
                    for await value in upstream { continuation.yield(transform(value)) }
                    continuation.finish()
                }
                continuation.onTermination = { _ in task.cancel() }
            }
        })
    }
}

/// The latest values of `a` and `b` through `transform`, after every change of either
/// (`combineLatest`): `combine(searchText, executing) { $0.count > 3 && !$1 }`.
public func combine<A: ValueSource, B: ValueSource, T: Sendable>(
    _ a: A, _ b: B, _ transform: @escaping @Sendable (A.Value, B.Value) -> T
) -> Derived<T> {
    Derived(current: {
        guard let x = a.current, let y = b.current else { return nil }
        return transform(x, y)
    }, values: {
        let (stream, continuation) = AsyncStream<T>.makeStream()
        let latest = Locked<(A.Value?, B.Value?)>((nil, nil))
        @Sendable func emit(_ update: (inout (A.Value?, B.Value?)) -> Void) {
            // Computed and yielded under the lock, so two sources' changes keep their order.
            latest.withLock { pair in
                update(&pair)
                if let x = pair.0, let y = pair.1 { continuation.yield(transform(x, y)) }
            }
        }
        let first = Task { for await x in a.values { emit { $0.0 = x } } }
        let second = Task { for await y in b.values { emit { $0.1 = y } } }
        continuation.onTermination = { _ in first.cancel(); second.cancel() }
        return stream
    })
}

extension Observable where Self: AnyObject {
    /// Binds `keyPath` one way to `source` (ReactiveSwift's `<~`, GSettings' `BIND_GET`):
    /// the property takes the source's value, then every change; nothing is written back.
    /// `model.bind(\.spinner, to: command.executing)`. Lasts until the returned binding is
    /// cancelled or released.
    @MainActor
    public func bind<Source: ValueSource>(_ keyPath: ReferenceWritableKeyPath<Self, Source.Value>,
                                          to source: Source) -> ChannelBinding where Self: Sendable {
        bind(keyPath, to: source) { $0 }
    }

    /// Binds `keyPath` one way to `transform` of `source`'s values.
    @MainActor
    public func bind<Source: ValueSource, T>(_ keyPath: ReferenceWritableKeyPath<Self, T>, to source: Source,
                                             _ transform: @escaping @MainActor (Source.Value) -> T) -> ChannelBinding where Self: Sendable {
        let box = KeyPathBox(keyPath)
        let values = source.values
        let task = Task { @MainActor [weak self] in
            for await value in values {
                guard let self else { return }
                self[keyPath: box.keyPath] = transform(value)
            }
        }
        return ChannelBinding(client: nil, endpoint: nil, cancel: { task.cancel() })
    }
}

/// A key path handed to the main actor's task that uses it. Key paths are immutable values;
/// the box is only ever read (on the main actor).
private struct KeyPathBox<Root, Value>: @unchecked Sendable {
    let keyPath: ReferenceWritableKeyPath<Root, Value>
    init(_ keyPath: ReferenceWritableKeyPath<Root, Value>) { self.keyPath = keyPath }
}
