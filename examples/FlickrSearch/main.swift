// flickr-search-example: the Flickr search screen's view model against a running propbusd with
// examples/flickr-search.json loaded (`scripts/run -- --model examples/flickr-search.json`).
//
//   FlickrSearch [--address ADDR | --system] [SEARCH TEXT...]
//
// Types the text into the view model (the binding sends it to the daemon) and runs the search
// in the same turn, while the loading indicator shows, and prints the result. Exit status: 0
// done, 1 the daemon refused, 64 usage, 69 no daemon.
import Glibc
import Observation
import PropBusClient

func fail(_ message: String, status: Int32) -> Never {
    let line = Array("FlickrSearch: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(status)
}

var bus = PropBusClient.Bus.session
var words: [String] = []
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--address":
        guard let address = arguments.popFirst() else { fail("--address needs a D-Bus address", status: 64) }
        bus = .address(address)
    case "--system":
        bus = .system
    case "-h", "--help":
        print("usage: FlickrSearch [--address ADDR | --system] [SEARCH TEXT...]")
        exit(0)
    default:
        words.append(argument)
    }
}

/// Waits (at most `seconds`) until `condition` holds; whether it does.
@MainActor
func waitUntil(seconds: Int = 10, _ condition: () -> Bool) async -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now + .seconds(seconds)
    while !condition(), clock.now < deadline { try? await Task.sleep(for: .milliseconds(5)) }
    return condition()
}

/// The view: prints the loading indicator each time the view model changes it.
@MainActor
func showLoadingIndicator(of viewModel: FlickrSearchViewModel) {
    withObservationTracking {
        _ = viewModel.loadingIndicatorHidden
    } onChange: {
        Task { @MainActor in
            print("loading indicator hidden: \(viewModel.loadingIndicatorHidden)")
            showLoadingIndicator(of: viewModel)
        }
    }
}

let client: PropBusClient
do { client = try await PropBusClient.connect(bus) } catch { fail("cannot reach the bus: \(error)", status: 69) }
let viewModel = FlickrSearchViewModel(keys: FlickrSearchKeys(client))
viewModel.start()
guard await waitUntil({ !viewModel.title.isEmpty }) else {
    fail("propbusd with examples/flickr-search.json is not running (no viewmodel.title)", status: 69)
}
print("title: \(viewModel.title)")
showLoadingIndicator(of: viewModel)

// Typed and searched in the same turn: the search runs on this text.
viewModel.searchText = words.isEmpty ? "kittens" : words.joined(separator: " ")
print("search text: \(viewModel.searchText)")
let result: String
do {
    result = try await viewModel.search()
} catch where error.name == PropBusClientError.Name.notEnabled {
    fail("the search is not enabled: the text must be longer than 3 characters (\(error.message))", status: 1)
} catch {
    fail("the search failed: \(error)", status: 1)
}
// The command's Executing turns false before its result arrives; the spinner follows it.
_ = await waitUntil({ viewModel.loadingIndicatorHidden })
print("result: \(result)")
viewModel.stop()
client.close()
