package postgres

import "sync/atomic"

type atomicCount struct{ n atomic.Int64 }

func (c *atomicCount) add()     { c.n.Add(1) }
func (c *atomicCount) get() int { return int(c.n.Load()) }
