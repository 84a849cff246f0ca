import DBusValues
import Dispatch
import PropBus
import PropBusExec
import SystemKit

/// The daemon's renders (docs/render.md): which keys each one reads, when each runs (its
/// ``RenderMachine``), the template rendered on the daemon's queue from the values committed,
/// and the file installed by a ``RenderPipeline``; the outcome published as state keys through
/// the ``RenderHost``.
///
/// One render's failure touches nothing else: each has its own machine, pipeline and state, a
/// template error or a failing program ends that run only, and the next change (or `propctl
/// render run`) tries again.
///
/// Confined to the host's queue.
public final class RenderRunner {
    private struct Entry {
        var declaration: RenderDeclaration
        var machine: RenderMachine
        var status = RenderStatus.pending
        /// The run in flight.
        var pipeline: RenderPipeline?
        /// Bumped to forget the deadline armed before.
        var timerGeneration = 0
        /// Waiting for the run in flight, and for the next one.
        var waiters: [(RenderStatus) -> Void] = []
        var nextWaiters: [(RenderStatus) -> Void] = []
        var lastRun: UInt64?
    }

    private let host: any RenderHost
    private let queue: DispatchQueue
    private let loop: CommandIOLoop
    /// Where files are staged, renamed and synced: one at a time, off the daemon's queue.
    private let installQueue = InstallThread()
    private var entries: [String: Entry] = [:]
    /// The renders reading each key, and walking each group.
    private var readers: [String: Set<String>] = [:]
    private var groupReaders: [String: Set<String>] = [:]
    /// Keys changed by commits and not looked at yet.
    private var changedKeys: Set<String> = []
    /// Renders whose run waits for one of the ``maximumConcurrentRuns`` to end, in order.
    private var waitingToStart: [String] = []
    private var stopped = false
    /// Told of each file installed: the seam for a confirmed apply (``RenderInstallRecorder``).
    public weak var installRecorder: (any RenderInstallRecorder)?

    /// The most runs in flight at once: each runs one program at a time, so the I/O loop holds
    /// at most this many of the renders' programs beside the executions.
    public static let maximumConcurrentRuns = 8

    /// Renders for `host`, confined to `queue` (the host's), running programs in `loop`.
    public init(host: any RenderHost, queue: DispatchQueue, loop: CommandIOLoop) {
        self.host = host
        self.queue = queue
        self.loop = loop
    }

    private var now: UInt64 { DispatchTime.now().uptimeNanoseconds }

    // MARK: Declarations

    /// Makes the declared renders those of `declarations`: new ones run (after their wait),
    /// changed ones run again, removed ones lose their state keys.
    public func load(_ declarations: [RenderDeclaration]) {
        dispatchPrecondition(condition: .onQueue(queue))
        let declared = Dictionary(declarations.map { ($0.name, $0) }) { first, _ in first }
        for name in entries.keys.sorted() where declared[name] == nil {
            guard let gone = entries.removeValue(forKey: name) else { continue }
            gone.pipeline?.stop()
            host.removeRenderStatus(of: name)
            host.logRender("render \(name): no longer declared; \(gone.declaration.destination) stays as it is")
        }
        for declaration in declarations.sorted(by: { $0.name < $1.name }) {
            let name = declaration.name
            if let entry = entries[name], entry.declaration == declaration { continue }
            var entry = entries[name] ?? Entry(declaration: declaration, machine: RenderMachine(wait: declaration.wait))
            if entries[name] == nil {
                host.publishRenderStatus(entry.status, of: name)
                let destination = declaration.destination
                // What a daemon killed in the middle of a render left behind, before the first run.
                installQueue.async { FileInstaller.removeLeftovers(of: destination) }
            }
            entry.declaration = declaration
            entry.machine.wait = declaration.wait
            entries[name] = entry
            perform(name, entries[name]!.machine.handle(.changed(now: now)))
        }
        readers = [:]
        groupReaders = [:]
        for entry in entries.values {
            for key in entry.declaration.keys { readers[key, default: []].insert(entry.declaration.name) }
            for group in entry.declaration.groups { groupReaders[group, default: []].insert(entry.declaration.name) }
        }
    }

    // MARK: Changes

    /// Keys a committed round changed. May be called in the middle of the commit: the renders
    /// they concern are looked at in a turn of the queue of their own, after it.
    public func noteChanged<Keys: Sequence>(_ keys: Keys) where Keys.Element == String {
        // Every round passes here: without renders it costs nothing more.
        guard !readers.isEmpty || !groupReaders.isEmpty else { return }
        let wasEmpty = changedKeys.isEmpty
        for key in keys where readers[key] != nil || groupReaders[Self.group(of: key)] != nil { changedKeys.insert(key) }
        guard wasEmpty, !changedKeys.isEmpty else { return }
        let runner = LoopBound(weak: self, on: queue)
        runner.async { $0.applyChanges() }
    }

    private func applyChanges() {
        let keys = changedKeys
        changedKeys = []
        var names: Set<String> = []
        for key in keys {
            names.formUnion(readers[key] ?? [])
            names.formUnion(groupReaders[Self.group(of: key)] ?? [])
        }
        let time = now
        for name in names.sorted() where entries[name] != nil { perform(name, entries[name]!.machine.handle(.changed(now: time))) }
    }

    static func group(of key: String) -> String {
        guard let dot = key.lastIndex(of: ".") else { return "" }
        return String(key[..<dot])
    }

    // MARK: Runs

    private func perform(_ name: String, _ actions: [RenderMachine.Action]) {
        for action in actions {
            switch action {
            case .start: start(name)
            case .arm(let deadline): arm(name, at: deadline)
            }
        }
    }

    private func arm(_ name: String, at deadline: UInt64) {
        guard !stopped, var entry = entries[name] else { return }
        entry.timerGeneration += 1
        let generation = entry.timerGeneration
        entries[name] = entry
        LoopBound(weak: self, on: queue).async(after: DispatchTime(uptimeNanoseconds: deadline)) { runner in
            guard let entry = runner.entries[name], entry.timerGeneration == generation else { return }
            runner.perform(name, runner.entries[name]!.machine.handle(.deadline(now: runner.now)))
        }
    }

    /// Renders now and hands the bytes to a pipeline; a render that cannot be written ends here.
    private func start(_ name: String) {
        guard var entry = entries[name] else { return }
        entry.waiters += entry.nextWaiters
        entry.nextWaiters = []
        entries[name] = entry
        let declaration = entry.declaration
        // Stopping: nothing starts any more, and nothing is said about it.
        guard !stopped else { return }
        let revision = host.renderRevision
        // The values are read when the run really starts, not when it was due.
        guard entries.values.count(where: { $0.pipeline != nil }) < Self.maximumConcurrentRuns else {
            if !waitingToStart.contains(name) { waitingToStart.append(name) }
            return
        }
        let output: RenderOutput
        switch evaluate(declaration, hiding: nil) {
        case .failure(let refusal): return ended(name, nil, refusal.state, refusal.message, revision: revision)
        case .success(let rendered): output = rendered
        }
        let pipeline = RenderPipeline(declaration: declaration, holdsSecrets: !output.secretKeys.isEmpty, queue: queue,
                                      installQueue: installQueue, loop: loop)
        entries[name]?.pipeline = pipeline
        pipeline.install(output.bytes, revision: revision) { [weak self] ending in
            guard let self else { return }
            if let installed = ending.installed { installRecorder?.renderInstalled(installed) }
            ended(name, pipeline, ending.state, ending.message, revision: revision)
        }
    }

    /// The required keys, the template and the secrets' rule: the output, or why there is none.
    private func evaluate(_ declaration: RenderDeclaration, hiding: ((String) -> Bool)?) -> Result<RenderOutput, Refusal> {
        func refused(_ state: RenderStatus.State, _ message: String) -> Result<RenderOutput, Refusal> {
            .failure(Refusal(state: state, message: message + "; nothing was written"))
        }
        if let unmet = Self.unmetRequirement(declaration.requirements, in: host) {
            return refused(.waitingForKeys, "waiting for keys: \(unmet)")
        }
        let where_ = "template \(declaration.templatePath ?? "text")"
        switch declaration.template.render(host, escaping: declaration.escaping, hiding: hiding) {
        case .failure(.missingKey(_, let message)): return refused(.waitingForKeys, "waiting for keys: \(where_):\(message)")
        case .failure(.failed(let message)): return refused(.renderFailed, "\(where_):\(message)")
        case .success(let output):
            if let secret = output.secretKeys.sorted().first, !RenderDeclaration.mayHoldSecrets(mode: declaration.mode) {
                return refused(.renderFailed, "the template reads secret key \(secret), and mode \(String(declaration.mode, radix: 8).leftPadded(to: 4)) of \(declaration.destination) lets others read it: declare \"mode\" 0640 or less")
            }
            return .success(output)
        }
    }

    /// Why there is nothing to write.
    private struct Refusal: Error {
        var state: RenderStatus.State
        var message: String
    }

    /// The first required key that is unset or empty, as a phrase; `nil` when all are set.
    static func unmetRequirement(_ requirements: [RenderRequirement], in values: some RenderValues) -> String? {
        for requirement in requirements {
            switch requirement {
            case .key(let key):
                guard let (value, _) = values.renderValue(of: key) else { return "\(key) is unset (there is no such key)" }
                if isEmpty(value) { return "\(key) is empty" }
            case .group(let group):
                let names = values.renderNames(inGroup: group)
                guard !names.isEmpty else { return "\(group).* has no keys" }
                for name in names where values.renderValue(of: group + "." + name).map({ isEmpty($0.value) }) ?? true {
                    return "\(group).\(name) is empty"
                }
            }
        }
        return nil
    }

    static func isEmpty(_ value: DBusValue) -> Bool {
        switch value {
        case .string(let text), .objectPath(let text), .signature(let text): text.isEmpty
        case .array(_, let items): items.isEmpty
        case .bytes(let bytes): bytes.isEmpty
        case .dictionary(_, _, let entries): entries.isEmpty
        case .variant(let inner): isEmpty(inner)
        default: false
        }
    }

    /// A run ended (`pipeline` `nil`: before any file work): the state, the log, the waiters,
    /// and the next run if changes came meanwhile.
    private func ended(_ name: String, _ pipeline: RenderPipeline?, _ state: RenderStatus.State, _ message: String, revision: UInt64) {
        // A run of a declaration replaced or removed meanwhile: its successor runs on its own.
        guard var entry = entries[name], pipeline == nil || entry.pipeline === pipeline else { return }
        entry.pipeline = nil
        entry.lastRun = UInt64(WallClockTime.now().seconds) * 1_000_000 + UInt64(WallClockTime.now().nanoseconds / 1000)
        let status = RenderStatus(state: state, message: message, revision: state == .ok ? revision : entry.status.revision)
        if status != entry.status {
            if status.state != entry.status.state || status.message != entry.status.message {
                host.logRender("render \(name): \(state.rawValue): \(message)")
            }
            host.publishRenderStatus(status, of: name)
        }
        entry.status = status
        let waiters = entry.waiters
        entry.waiters = []
        entries[name] = entry
        for waiter in waiters { waiter(status) }
        guard !stopped else { return }
        perform(name, entries[name]!.machine.handle(.finished(now: now)))
        while pipeline != nil, !waitingToStart.isEmpty, entries.values.count(where: { $0.pipeline != nil }) < Self.maximumConcurrentRuns {
            start(waitingToStart.removeFirst())
        }
    }

    // MARK: Requests

    /// Every render, by name.
    public var summaries: [RenderSummary] {
        entries.keys.sorted().compactMap { try? summary(of: $0) }
    }

    public func summary(of name: String) throws(PropBusError) -> RenderSummary {
        let entry = try self.entry(name)
        return RenderSummary(declaration: entry.declaration, status: entry.status, lastRun: entry.lastRun, running: entry.pipeline != nil)
    }

    private func entry(_ name: String) throws(PropBusError) -> Entry {
        guard let entry = entries[name] else {
            let known = entries.keys.sorted()
            throw PropBusError(.invalidArgs, "no render named \(name); " + (known.isEmpty ? "no model file declares renders" : "the renders are \(known.joined(separator: ", "))"))
        }
        return entry
    }

    /// Runs `name` now, without its wait (after the run in flight, if there is one), and calls
    /// `then` with its outcome.
    public func run(_ name: String, then: @escaping (RenderStatus) -> Void) throws(PropBusError) {
        dispatchPrecondition(condition: .onQueue(queue))
        _ = try entry(name)
        guard !stopped else { throw PropBusError(.unavailable, "propbusd is stopping: render \(name) was not run") }
        entries[name]?.nextWaiters.append(then)
        perform(name, entries[name]!.machine.handle(.runRequested(now: now)))
    }

    /// What `name` would write now, without writing it. The value of a secret key `hiding`
    /// says to hide (one the caller may not read) shows as `<secret>`, and a block it decides
    /// is left out, marked.
    public func preview(_ name: String, hiding: ((String) -> Bool)?) throws(PropBusError) -> RenderPreview {
        dispatchPrecondition(condition: .onQueue(queue))
        switch evaluate(try entry(name).declaration, hiding: hiding) {
        case .failure(let refusal): return RenderPreview(state: refusal.state, message: refusal.message, bytes: [], masked: false)
        case .success(let output): return RenderPreview(state: .ok, message: "", bytes: output.bytes, masked: output.masked)
        }
    }

    /// Puts back what `record` replaced and reloads: a confirmed apply's rollback of a file a
    /// render installed (``RenderInstallRecorder``). The render's state says how it went.
    public func rollBack(_ record: InstalledRender, then: @escaping (RenderStatus) -> Void) throws(PropBusError) {
        dispatchPrecondition(condition: .onQueue(queue))
        let declaration = try entry(record.name).declaration
        let pipeline = RenderPipeline(declaration: declaration, holdsSecrets: true, queue: queue, installQueue: installQueue, loop: loop)
        pipeline.restore(record.previous) { [weak self] ending in
            guard let self, var entry = entries[record.name] else { return }
            let status = RenderStatus(state: ending.state, message: "rolled back: " + ending.message, revision: entry.status.revision)
            host.logRender("render \(record.name): \(status.message)")
            entry.status = status
            entries[record.name] = entry
            host.publishRenderStatus(status, of: record.name)
            then(status)
        }
    }

    /// Stops: no run starts any more, the programs running are stopped and staged files
    /// removed; `then` once every run in flight has ended, or after `timeout` seconds.
    public func stop(timeout: Double = 3, then: @escaping () -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        stopped = true
        for name in entries.keys {
            entries[name]?.timerGeneration += 1
            entries[name]?.pipeline?.stop()
        }
        waitForRuns(until: now + UInt64(timeout * 1_000_000_000), then: then)
    }

    private func waitForRuns(until deadline: UInt64, then: @escaping () -> Void) {
        if entries.values.allSatisfy({ $0.pipeline == nil }) || now >= deadline { return then() }
        let runner = LoopBound(self, on: queue), next = LoopBound(then, on: queue)
        queue.asyncAfter(deadline: .now() + .milliseconds(20)) { runner.value.waitForRuns(until: deadline, then: next.value) }
    }
}
