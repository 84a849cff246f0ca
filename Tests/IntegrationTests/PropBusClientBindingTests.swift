import DBus
import Foundation
import Observation
import PropBus
import PropBusClient
import XCTest

/// A view model with a spinner, a label and a button's enabled state.
@MainActor @Observable
final class SpinnerModel {
    var spinner = false
    var label = ""
    var canRun = false
}

/// One-way bindings, derived values, command observers and app-side handlers of the Swift
/// library against the real daemon.
final class PropBusClientBindingTests: ClientLibraryTestCase, @unchecked Sendable {
    private func shell(_ script: String) -> DBusValue {
        .array(of: .string, ["/bin/sh", "-c", script].map { .string($0) })
    }

    @MainActor
    private func onMain(timeout: TimeInterval = 10, _ condition: @MainActor () -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while !condition(), Date() < deadline { try? await Task.sleep(nanoseconds: 2_000_000) }
        return condition()
    }

    @MainActor
    func testASpinnerFollowsExecutingInOneLineAndMapAndCombineDeriveState() async throws {
        try await client.create("vm.text", "s", default: .string("ab"))
        try await client.createCommand("vm.slow", ["exec": shell("sleep 30"), "persistent": .boolean(false)])
        let model = SpinnerModel()
        let slow = library.command("vm.slow")
        let text = library.property("vm.text", as: String.self)
        let bindings = [
            model.bind(\.spinner, to: slow.executing),
            model.bind(\.label, to: text.map { "text: \($0)" }),
            model.bind(\.canRun, to: combine(text, slow.executing) { $0.count > 3 && !$1 }),
        ]
        defer { for binding in bindings { binding.cancel() } }
        let initial = await onMain { model.label == "text: ab" && !model.spinner && !model.canRun }
        XCTAssertTrue(initial, "label \(model.label), spinner \(model.spinner), canRun \(model.canRun)")
        try await client.set("vm.text", .string("kittens"))
        let enabled = await onMain { model.canRun && model.label == "text: kittens" }
        XCTAssertTrue(enabled)
        let id = try await slow.start("")
        let spinning = await onMain { model.spinner && !model.canRun }
        XCTAssertTrue(spinning, "the spinner follows executing, and the button is disabled while it runs")
        try await slow.cancel(id)
        let stopped = await onMain { !model.spinner && model.canRun }
        XCTAssertTrue(stopped)
        XCTAssertEqual(bindings[0].state, .live, "a one-way binding writes nothing")
    }

    func testEveryObserverSeesResultsAndErrorsOfEveryonesExecutions() async throws {
        try await client.createCommand("vm.echo", ["exec": shell(#"test "$PROPBUS_INPUT" = bad && exit 4; printf '%s!' "$PROPBUS_INPUT""#),
                                                   "persistent": .boolean(false), "concurrent": .boolean(true)])
        let observer = try await PropBusClient.connect(.address(bus.address))
        defer { observer.close() }
        let watched = observer.command("vm.echo")
        let events = await watched.subscribedExecutions()
        let results = StreamRecorder(watched.results)
        let errors = StreamRecorder(watched.errors)
        let recorded = StreamRecorder(events.map { event -> String in
            switch event {
            case .started: "started"
            case .finished(_, let result): "finished \(result)"
            case .failed(_, let error): "failed \(error.name)"
            }
        })
        // Another client runs it: the observer still sees everything.
        _ = try await library.command("vm.echo").execute("one")
        do {
            _ = try await library.command("vm.echo").execute("bad")
            XCTFail("a failing execution returned")
        } catch {
            XCTAssertEqual(error.name, PropBusClientError.Name.executionFailed)
        }
        let seen = await recorded.wait { $0.count == 4 }
        XCTAssertEqual(seen, ["started", "finished one!", "started", "failed \(PropBusClientError.Name.executionFailed)"])
        let resultsSeen = await results.wait { !$0.isEmpty }
        XCTAssertEqual(resultsSeen, ["one!"])
        let errorsSeen = await errors.wait { !$0.isEmpty }
        XCTAssertEqual(errorsSeen.map(\.name), [PropBusClientError.Name.executionFailed])
    }

    func testASwiftAppCanBeACommandsHandler() async throws {
        try await client.createCommand("text.upper", ["handler": .boolean(true), "persistent": .boolean(false)])
        let server = try await PropBusClient.connect(.address(bus.address))
        defer { server.close() }
        let service = try await server.serve("text.upper") { (text: String) async throws(PropBusClientError) -> String in
            if text == "boom" { throw PropBusClientError(name: "org.propbus.PropBus1.Error.InvalidValue", message: "no booms") }
            if text == "slow" { try? await Task.sleep(for: .seconds(30)) }
            return text.uppercased()
        }
        let upper = library.command("text.upper")
        let enabled = StreamRecorder(upper.isEnabled)
        _ = await enabled.wait { $0.last == true }
        let result = try await upper.execute("cats")
        XCTAssertEqual(result, "CATS")
        do {
            _ = try await upper.execute("boom")
            XCTFail("the handler's error was not the execution's")
        } catch {
            XCTAssertEqual(error.name, "org.propbus.PropBus1.Error.InvalidValue", "\(error)")
            XCTAssertEqual(error.message, "no booms")
        }
        let id = try await upper.start("slow")
        try await upper.cancel(id)
        await service.stop()
        let disabled = await enabled.wait { $0.last == false }
        XCTAssertEqual(disabled.last, false, "no handler, not enabled")
    }
}
