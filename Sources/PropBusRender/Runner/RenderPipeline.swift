import Dispatch
import PropBus
import PropBusExec
import SystemKit

/// One install of one rendered file, step by step: stage beside the destination (owner and
/// mode before the first byte, then `fsync`) unless the destination holds these bytes already
/// → `check` with the staged path → `rename` and `fsync` of the directory → `reload`; a check
/// that fails leaves the old file, a reload that fails puts the previous file back and reloads
/// again.
///
/// Confined to the daemon's queue; file work runs on the ``InstallThread`` and programs in the
/// daemon's one ``CommandIOLoop``, each step hopping back to the queue with its result, so the
/// queue never waits for a disk or a program.
final class RenderPipeline {
    /// How a run ended, for the render's state.
    struct Ending: Sendable, Equatable {
        var state: RenderStatus.State
        var message: String
        /// The file now in place and what it replaced, when this run installed one.
        var installed: InstalledRender?
    }

    private let declaration: RenderDeclaration
    private let queue: DispatchQueue
    private let installQueue: InstallThread
    private let loop: CommandIOLoop
    /// Whether the file holds a secret's value: programs' output then stays out of messages.
    private let holdsSecrets: Bool
    private var completion: ((Ending) -> Void)?
    /// The program running now, to stop it when the daemon stops.
    private var process: CommandProcess?
    /// The running program's time limit, and whether it passed.
    private var timer: DispatchWorkItem?
    private var timedOut = false
    private var stopping = false

    init(declaration: RenderDeclaration, holdsSecrets: Bool, queue: DispatchQueue, installQueue: InstallThread, loop: CommandIOLoop) {
        self.declaration = declaration
        self.holdsSecrets = holdsSecrets
        self.queue = queue
        self.installQueue = installQueue
        self.loop = loop
    }

    private var bound: LoopBound<RenderPipeline> { LoopBound(self, on: queue) }

    /// Runs `work` on the install thread and `then` with its result back on the daemon's queue.
    private func onInstallQueue<T: Sendable>(_ work: @escaping @Sendable () -> T, then: @escaping (RenderPipeline, T) -> Void) {
        let pipeline = bound, next = LoopBound(then, on: queue)
        installQueue.async {
            let result = work()
            pipeline.queue.async { next.value(pipeline.value, result) }
        }
    }

    // MARK: Install

    /// What the install thread did with a run's bytes.
    private enum Staging: Sendable {
        /// The destination holds them already; a reload is due when a daemon stopped before one.
        case unchanged(reloadDue: Bool)
        /// Staged beside the destination, for the check.
        case staged(StagedFile)
        /// Without a check: staged and renamed into place in the same turn of the thread.
        case installed(StagedFile)
    }

    /// Installs `bytes` (the revision `revision`'s output) and calls `completion` once, on the queue.
    func install(_ bytes: [UInt8], revision: UInt64, completion: @escaping (Ending) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        self.completion = completion
        let declaration = declaration
        onInstallQueue({ () -> Result<Staging, InstallError> in
            Result { () throws(InstallError) in
                let version = FileVersion(bytes: bytes, ownership: try declaration.resolvedOwnership())
                let current = try FileInstaller.current(at: declaration.destination)
                // Write only when it differs: an unchanged file is neither rewritten nor reloaded
                // (unless a daemon stopped between its rename and its reload).
                if current == version { return .unchanged(reloadDue: !declaration.reload.isEmpty && FileInstaller.isReloadDue(declaration.destination)) }
                let path = try FileInstaller.stage(version, beside: declaration.destination)
                let staged = StagedFile(path: path, destination: declaration.destination, previous: current)
                guard declaration.check.isEmpty else { return .staged(staged) }
                // Nothing to check: no turn of the daemon's queue between the steps.
                try Self.put(staged, reloads: !declaration.reload.isEmpty)
                return .installed(staged)
            }
        }, then: { pipeline, result in pipeline.staged(result, revision: revision, size: bytes.count) })
    }

    private func staged(_ result: Result<Staging, InstallError>, revision: UInt64, size: Int) {
        let staged: StagedFile
        let unchanged = "\(declaration.destination) already holds what revision \(revision) gives; not rewritten"
        switch result {
        case .failure(let error): return finish(.installFailed, error.message)
        case .success(.unchanged(reloadDue: false)): return finish(.ok, unchanged)
        case .success(.unchanged(reloadDue: true)):
            return run(declaration.reload, role: "reload", file: declaration.destination) { pipeline, failure in
                if let failure { return pipeline.finish(.reloadFailed, "\(unchanged); its reload, due since propbusd stopped before it, failed: \(failure)") }
                pipeline.clearReloadDue()
                pipeline.finish(.ok, unchanged + "; reloaded, as propbusd had stopped before reloading it")
            }
        case .success(.installed(let file)): return installed(file, revision: revision, size: size)
        case .success(.staged(let file)): staged = file
        }
        guard !stopping else {
            discard(staged)
            return finish(.installFailed, "propbusd is stopping; \(declaration.destination) was left as it was")
        }
        let reloads = !declaration.reload.isEmpty
        run(declaration.check, role: "check", file: staged.path) { pipeline, failure in
            if let failure {
                pipeline.discard(staged)
                return pipeline.finish(.checkFailed, "\(failure); \(pipeline.declaration.destination) was left as it was")
            }
            pipeline.onInstallQueue({ Result { () throws(InstallError) in try Self.put(staged, reloads: reloads) } }, then: { pipeline, result in
                if case .failure(let error) = result { return pipeline.finish(.installFailed, error.message) }
                pipeline.installed(staged, revision: revision, size: size)
            })
        }
    }

    /// Renames the staged file into place; on the install thread.
    private static func put(_ staged: StagedFile, reloads: Bool) throws(InstallError) {
        // Noted before the rename, synced with it: a daemon that stops before the reload
        // succeeded reloads at its next start.
        if reloads { try FileInstaller.markReloadDue(staged.destination) }
        try FileInstaller.install(staged)
    }

    /// The file is in place: the reload, and putting the previous file back if it fails.
    private func installed(_ staged: StagedFile, revision: UInt64, size: Int) {
        let record = InstalledRender(name: declaration.name, destination: staged.destination, previous: staged.previous, revision: revision)
        let wrote = "wrote \(staged.destination) (\(size) bytes, revision \(revision))"
        guard !declaration.reload.isEmpty else { return finish(.ok, wrote, installed: record) }
        run(declaration.reload, role: "reload", file: staged.destination) { pipeline, failure in
            guard let failure else {
                pipeline.clearReloadDue()
                return pipeline.finish(.ok, wrote + " and reloaded", installed: record)
            }
            pipeline.putBack(staged.previous) { pipeline, outcome, _ in
                pipeline.finish(.reloadFailed, "\(failure); \(outcome)")
            }
        }
    }

    // MARK: Putting back

    /// Puts `previous` back at the destination (or removes the file when there was none) and
    /// reloads again: after a failed reload, and for a rollback of what a run installed.
    /// `then` gets what happened, as a sentence, and whether all of it went well.
    func putBack(_ previous: FileVersion?, then: @escaping (RenderPipeline, String, Bool) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue))
        let destination = declaration.destination
        onInstallQueue({ Result { () throws(InstallError) in try FileInstaller.restore(previous, at: destination) } }, then: { pipeline, result in
            if case .failure(let error) = result { return then(pipeline, "the previous file could not be put back: \(error.message)", false) }
            let what = previous == nil ? "\(destination) was removed (there was none before)" : "the previous \(destination) was put back"
            guard !pipeline.declaration.reload.isEmpty else { return then(pipeline, what, true) }
            pipeline.run(pipeline.declaration.reload, role: "reload", file: destination) { pipeline, failure in
                if failure == nil { pipeline.clearReloadDue() }
                then(pipeline, what + (failure.map { " and the reload after it failed too: \($0)" } ?? " and reloaded"), failure == nil)
            }
        })
    }

    /// For a rollback outside a run: puts `previous` back, reloads, and calls `completion` with
    /// how it went.
    func restore(_ previous: FileVersion?, completion: @escaping (Ending) -> Void) {
        self.completion = completion
        putBack(previous) { pipeline, outcome, succeeded in
            pipeline.finish(succeeded ? .ok : .reloadFailed, outcome)
        }
    }

    // MARK: Programs

    /// Runs `argv` with `{{file}}` replaced by `file`; `then` gets `nil` on exit status 0, else
    /// why not (the program's output left out when the file holds a secret).
    private func run(_ argv: [String], role: String, file: String, then: @escaping (RenderPipeline, String?) -> Void) {
        let words = argv.map { $0.replacingAll("{{file}}", with: file) }
        let shown = "\(role) (\(words.joined(separator: " ")))"
        guard !stopping else { return then(self, "\(shown) was not run: propbusd is stopping") }
        let pipeline = bound, next = LoopBound(then, on: queue)
        timedOut = false
        let environment = ["PROPBUS_RENDER": declaration.name, "PROPBUS_RENDER_FILE": file, "PROPBUS_RENDER_DESTINATION": declaration.destination]
        do {
            process = try CommandProcess.start(words, input: [], environment: environment, outputLimit: 64 * 1024, loop: loop) { outcome in
                pipeline.queue.async {
                    let pipeline = pipeline.value
                    pipeline.timer?.cancel()
                    pipeline.timer = nil
                    pipeline.process = nil
                    next.value(pipeline, pipeline.failure(of: outcome, shown: shown, timedOut: pipeline.timedOut))
                }
            }
        } catch {
            return then(self, "\(shown) could not be started: \(error.message)")
        }
        let timer = DispatchWorkItem { [weak self] in
            guard let self, let process else { return }
            timedOut = true
            process.terminate(grace: 2)
        }
        self.timer = timer
        queue.asyncAfter(deadline: .now() + declaration.timeout, execute: timer)
    }

    private func failure(of outcome: CommandProcess.Outcome, shown: String, timedOut: Bool) -> String? {
        if timedOut { return "\(shown) did not finish within \(Self.seconds(declaration.timeout)) s and was stopped" }
        let what: String
        switch outcome.ending {
        case .exited(0): return nil
        case .exited(let status): what = "\(shown) exited with status \(status)"
        case .signaled(let signal): what = "\(shown) was killed by signal \(signal)"
        case .outputTooLarge: what = "\(shown) wrote more than \(outcome.outputLimit) bytes and was stopped"
        }
        // A checker may quote the file it read (nginx -t prints the offending line).
        if holdsSecrets { return what + " (its output is left out: the file holds secret keys)" }
        let text = outcome.errorTail.isEmpty ? String(decoding: outcome.output.suffix(4096), as: UTF8.self) : outcome.errorTail
        let lines = text.split(separator: "\n", omittingEmptySubsequences: true).suffix(5).joined(separator: " / ")
        return lines.isEmpty ? what : what + ": " + String(TextBytes.replacingNUL(in: lines).prefix(1000))
    }

    private static func seconds(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }

    // MARK: Ending

    private func discard(_ staged: StagedFile) {
        installQueue.async { FileInstaller.discard(staged) }
    }

    private func clearReloadDue() {
        let destination = declaration.destination
        installQueue.async { FileInstaller.clearReloadDue(destination) }
    }

    private func finish(_ state: RenderStatus.State, _ message: String, installed: InstalledRender? = nil) {
        let completion = self.completion
        self.completion = nil
        completion?(Ending(state: state, message: message, installed: installed))
    }

    /// The daemon stops: the program running now is stopped, and no later step starts (a
    /// staged file is removed; one already installed stays).
    func stop() {
        stopping = true
        process?.terminate(grace: 1)
    }
}

extension String {
    /// Every occurrence of `target` replaced, without Foundation.
    func replacingAll(_ target: String, with replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}
