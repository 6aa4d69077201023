package provider

import "encoding/json"

// ArgsObject is a call's arguments as the JSON object ctxfs records (and
// the APIs take): empty arguments are {}, anything that is not an object
// is kept whole under "arguments".
func ArgsObject(args string) json.RawMessage { return argsObject(args) }
