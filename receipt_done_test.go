package artemis

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A receipt resolved before anyone asked makes no channel: Wait returns
// its outcome, and Done is a closed channel.
func TestReceiptResolvedFirstMakesNoChannel(t *testing.T) {
	r := newReceipt("id-1", urnCreated, "orders", heardNothing)
	r.resolve(&amqp.StateRejected{}, nil)
	assert.ErrorIs(t, r.Wait(context.Background()), ErrNotAccepted)
	assert.Nil(t, r.done, "nobody waited while it was pending")
	select {
	case <-r.Done():
	default:
		t.Fatal("Done of a resolved receipt is not closed")
	}
	assert.ErrorIs(t, r.Wait(context.Background()), ErrNotAccepted, "the same result every time")
}

// A Wait or a Done that finds the receipt pending gets the channel its
// resolution closes; a Wait whose context ends first leaves it pending,
// and the next Wait gets the outcome.
func TestReceiptPendingWaitersGetItsResolution(t *testing.T) {
	r := newReceipt("id-1", urnCreated, "orders", nil)
	done := r.Done()
	require.NotNil(t, done)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, r.Wait(ctx), context.DeadlineExceeded)
	select {
	case <-done:
		t.Fatal("closed while pending")
	default:
	}
	waited := make(chan error, 1)
	go func() { waited <- r.Wait(context.Background()) }()
	time.Sleep(5 * time.Millisecond)
	r.resolve(&amqp.StateAccepted{}, nil)
	select {
	case err := <-waited:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Wait never returned")
	}
	<-done
	assert.Equal(t, (<-chan struct{})(r.done), r.Done(), "one channel")
}

// Waits and Dones racing the resolution (run with -race): every one of
// them returns, with the one outcome, however they interleave.
func TestReceiptWaitersRacingTheResolution(t *testing.T) {
	for i := range 500 {
		r := newReceipt("id-1", urnCreated, "orders", heardNothing)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for j := range 4 {
			wg.Go(func() {
				if j%2 == 0 {
					errs <- r.Wait(context.Background())
					return
				}
				select {
				case <-r.Done():
					errs <- r.Wait(context.Background())
				case <-time.After(5 * time.Second):
					errs <- context.DeadlineExceeded
				}
			})
		}
		if i%2 == 0 {
			r.resolve(&amqp.StateReleased{}, nil)
		} else {
			go r.resolve(&amqp.StateReleased{}, nil)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.ErrorIs(t, err, ErrNotAccepted, "round %d", i)
		}
	}
}

// heardNothing is a WithOnOutcome callback that takes the outcome, so a
// failure nobody waited on is not logged.
func heardNothing(string, error) {}
