package gateway

// SetLiveBuffer sets how many live events may wait for a client before core
// NATS drops them (tests of the gap repair); negative: no subscription, as
// if every live event were lost. Call before Run.
func SetLiveBuffer(g *Gateway, n int) { g.liveBuffer = n }
