// Package podqueue is the loop both test bed agents (pod-exec-sync and
// pod-runner) run: a pod informer whose every event queues the pod's
// namespace/name key, and workers that sync each key, retrying a failed one
// with back-off.
package podqueue

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Queue of pod keys, fed by a pod informer.
type Queue struct {
	// Lister reads the informer's pods by key.
	Lister   cache.Indexer
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
}

// New watches every pod; a key that fails to sync is retried after
// limiter's back-off.
func New(client kubernetes.Interface, limiter workqueue.TypedRateLimiter[string]) (*Queue, error) {
	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	informer := factory.Core().V1().Pods().Informer()
	q := &Queue{
		Lister:   informer.GetIndexer(),
		factory:  factory,
		informer: informer,
		queue:    workqueue.NewTypedRateLimitingQueue(limiter),
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			q.queue.Add(key)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, err
	}
	return q, nil
}

// Run starts the informer, calls ready (if any) once its cache is synced,
// then syncs keys with `workers` goroutines (several: one slow pod never
// holds up the others) until ctx ends and they return.
func (q *Queue) Run(ctx context.Context, workers int, ready func(), syncKey func(context.Context, string) error) error {
	q.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), q.informer.HasSynced) {
		return fmt.Errorf("pod cache never synced")
	}
	if ready != nil {
		ready()
	}
	go func() {
		<-ctx.Done()
		q.queue.ShutDown()
	}()
	var running sync.WaitGroup
	for range workers {
		running.Add(1)
		go func() {
			defer running.Done()
			for q.next(ctx, syncKey) {
			}
		}()
	}
	running.Wait()
	return nil
}

func (q *Queue) next(ctx context.Context, syncKey func(context.Context, string) error) bool {
	key, quit := q.queue.Get()
	if quit {
		return false
	}
	defer q.queue.Done(key)
	if err := syncKey(ctx, key); err != nil {
		klog.ErrorS(err, "sync failed, retrying", "pod", key)
		q.queue.AddRateLimited(key)
		return true
	}
	q.queue.Forget(key)
	return true
}
