// The core's API speaks JSON (ValueText, model files, propctl's output): whoever imports the
// core gets `JSONValue` with it, as when the codec lived here.
@_exported import JSON
