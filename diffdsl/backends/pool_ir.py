"""The spinning pool's machine code (pool.py), as LLVM IR text: a worker's loop that serves
the slices posted to its slot, and the calls that post a batch's slices, run the first and
the ones no worker took, and wait for the rest. `PAUSE` stands for the CPU's spin-wait hint
(pool._pause)."""

SLOT = """
; The slice a slot holds: the row function's call with the slot's arguments.
define internal void @slice(ptr %slot) nounwind {
entry:
  %fn.a = getelementptr inbounds ptr, ptr %slot, i64 1
  %fn = load ptr, ptr %fn.a
  %ports.a = getelementptr inbounds ptr, ptr %slot, i64 2
  %ports = load ptr, ptr %ports.a
  %strides.a = getelementptr inbounds ptr, ptr %slot, i64 3
  %strides = load ptr, ptr %strides.a
  %begin.a = getelementptr inbounds i64, ptr %slot, i64 4
  %begin = load i64, ptr %begin.a
  %end.a = getelementptr inbounds i64, ptr %slot, i64 5
  %end = load i64, ptr %end.a
  %scratch.a = getelementptr inbounds ptr, ptr %slot, i64 6
  %scratch = load ptr, ptr %scratch.a
  call void %fn(ptr %ports, ptr %strides, i64 %begin, i64 %end, ptr %scratch)
  ret void
}

; Slot w - 1, where slice w is posted.
define internal ptr @slot(ptr %slots, i64 %w) nounwind {
entry:
  %at = mul i64 %w, 16
  %slot.at = sub i64 %at, 16
  %slot = getelementptr inbounds i64, ptr %slots, i64 %slot.at
  ret ptr %slot
}

; A worker: take and run each slice posted to its slot; return when CLOSED, or after `budget`
; spins with nothing posted (the slot then AWAY), or at once if woken with nothing posted.
define void @diffdsl_pool_serve(ptr %slot) nounwind {
entry:
  %budget.a = getelementptr inbounds i64, ptr %slot, i64 7
  %budget = load i64, ptr %budget.a
  br label %look
look:
  %idle = phi i64 [ 0, %entry ], [ %idle.next, %spin ], [ 0, %ran ], [ 0, %stay ]
  %state = load atomic i64, ptr %slot acquire, align 8
  switch i64 %state, label %spin [ i64 1, label %take
                                   i64 5, label %leave ]
take:
  %took = cmpxchg ptr %slot, i64 1, i64 2 acq_rel acquire
  %mine = extractvalue { i64, i1 } %took, 1
  br i1 %mine, label %run, label %ran
run:
  call void @slice(ptr %slot)
  %told = cmpxchg ptr %slot, i64 2, i64 3 acq_rel acquire  ; fails only once CLOSED
  %kept = extractvalue { i64, i1 } %told, 1
  br i1 %kept, label %ran, label %leave
ran:
  br label %look
spin:
  PAUSE
  %idle.next = add i64 %idle, 1
  %over = icmp ugt i64 %idle.next, %budget
  br i1 %over, label %away, label %look
away:
  %swap = cmpxchg ptr %slot, i64 0, i64 4 acq_rel acquire
  %gone = extractvalue { i64, i1 } %swap, 1
  %seen = extractvalue { i64, i1 } %swap, 0
  %asleep = icmp eq i64 %seen, 4
  %back = or i1 %gone, %asleep
  br i1 %back, label %leave, label %stay
stay:
  br label %look
leave:
  ret void
}

; Post slices 1..count-1 (slice w: rows rows * w / count up to rows * (w + 1) / count, scratch
; at %scratch + w * %size) to slots 0..count-2; the bit of each worker that was AWAY is set in
; the result.
define i64 @diffdsl_pool_start(ptr %slots, i64 %count, i64 %fn, ptr %ports, ptr %strides,
                               i64 %rows, ptr %scratch, i64 %size) nounwind {
entry:
  br label %look
look:
  %w = phi i64 [ 1, %entry ], [ %w.next, %post ]
  %mask = phi i64 [ 0, %entry ], [ %mask.next, %post ]
  %more = icmp ult i64 %w, %count
  br i1 %more, label %post, label %done
post:
  %slot = call ptr @slot(ptr %slots, i64 %w)
  %fn.a = getelementptr inbounds i64, ptr %slot, i64 1
  store i64 %fn, ptr %fn.a
  %ports.a = getelementptr inbounds ptr, ptr %slot, i64 2
  store ptr %ports, ptr %ports.a
  %strides.a = getelementptr inbounds ptr, ptr %slot, i64 3
  store ptr %strides, ptr %strides.a
  %w.next = add i64 %w, 1
  %begin.r = mul i64 %rows, %w
  %begin = udiv i64 %begin.r, %count
  %end.r = mul i64 %rows, %w.next
  %end = udiv i64 %end.r, %count
  %begin.a = getelementptr inbounds i64, ptr %slot, i64 4
  store i64 %begin, ptr %begin.a
  %end.a = getelementptr inbounds i64, ptr %slot, i64 5
  store i64 %end, ptr %end.a
  %skip = mul i64 %w, %size
  %scratch.p = getelementptr inbounds i8, ptr %scratch, i64 %skip
  %scratch.a = getelementptr inbounds ptr, ptr %slot, i64 6
  store ptr %scratch.p, ptr %scratch.a
  %old = atomicrmw xchg ptr %slot, i64 1 seq_cst
  %away = icmp eq i64 %old, 4
  %bit.at = sub i64 %w, 1
  %bit = shl i64 1, %bit.at
  %bit.if = select i1 %away, i64 %bit, i64 0
  %mask.next = or i64 %mask, %bit.if
  br label %look
done:
  ret i64 %mask
}

; Run slice 0 here; then each slice still POSTED (taken from its worker: its slot IDLE); then
; wait while each slot is TAKEN and set a DONE one back to IDLE. Run again after the batch
; ended (`Pool.run`, interrupted), it computes slice 0 again and returns.
define void @diffdsl_pool_finish(ptr %slots, i64 %count, i64 %fn.i, ptr %ports,
                                 ptr %strides, i64 %rows, ptr %scratch, i64 %size) nounwind {
entry:
  %fn = inttoptr i64 %fn.i to ptr
  %end = udiv i64 %rows, %count
  call void %fn(ptr %ports, ptr %strides, i64 0, i64 %end, ptr %scratch)
  br label %steal
steal:
  %v = phi i64 [ 1, %entry ], [ %v.next, %stolen ]
  %more.v = icmp ult i64 %v, %count
  br i1 %more.v, label %try, label %next
try:
  %slot.v = call ptr @slot(ptr %slots, i64 %v)
  %took = cmpxchg ptr %slot.v, i64 1, i64 0 acq_rel acquire
  %mine = extractvalue { i64, i1 } %took, 1
  br i1 %mine, label %run, label %stolen
run:
  call void @slice(ptr %slot.v)
  br label %stolen
stolen:
  %v.next = add i64 %v, 1
  br label %steal
next:
  %w = phi i64 [ 1, %steal ], [ %w.next, %collect ]
  %more = icmp ult i64 %w, %count
  br i1 %more, label %wait, label %done
wait:
  %slot = call ptr @slot(ptr %slots, i64 %w)
  br label %poll
poll:
  %state = load atomic i64, ptr %slot acquire, align 8
  %running = icmp eq i64 %state, 2
  br i1 %running, label %pause, label %collect
pause:
  PAUSE
  br label %poll
collect:
  %swap = cmpxchg ptr %slot, i64 3, i64 0 acq_rel acquire
  %w.next = add i64 %w, 1
  br label %next
done:
  ret void
}

; Post the slices; where no worker was AWAY, run slice 0 and the rest too. The AWAY mask.
define i64 @diffdsl_pool_run(ptr %slots, i64 %count, i64 %fn, ptr %ports, ptr %strides,
                             i64 %rows, ptr %scratch, i64 %size) nounwind {
entry:
  %away = call i64 @diffdsl_pool_start(ptr %slots, i64 %count, i64 %fn, ptr %ports,
                                       ptr %strides, i64 %rows, ptr %scratch, i64 %size)
  %awake = icmp eq i64 %away, 0
  br i1 %awake, label %finish, label %done
finish:
  call void @diffdsl_pool_finish(ptr %slots, i64 %count, i64 %fn, ptr %ports, ptr %strides,
                                 i64 %rows, ptr %scratch, i64 %size)
  br label %done
done:
  ret i64 %away
}

; Tell a worker to stop: it leaves its spin, or sees CLOSED when its Event wakes it.
define void @diffdsl_pool_close(ptr %slot) nounwind {
entry:
  %old = atomicrmw xchg ptr %slot, i64 5 seq_cst
  ret void
}

; `n` spins of the worker's loop, timed once to turn SPIN_S into a count.
define void @diffdsl_pool_spin(ptr %slot, i64 %n) nounwind {
entry:
  br label %look
look:
  %k = phi i64 [ 0, %entry ], [ %k.next, %look ]
  %state = load atomic i64, ptr %slot acquire, align 8
  PAUSE
  %k.next = add i64 %k, 1
  %more = icmp ult i64 %k.next, %n
  br i1 %more, label %look, label %done
done:
  ret void
}
"""
