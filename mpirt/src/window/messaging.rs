//! The portable path: one-sided operations as active messages on the window's own context
//! (a duplicate of its communicator's), over whatever PML and transports carry the ranks.
//!
//! An origin sends each operation as one request (tag `REQUEST`): header and data, copied
//! out of the origin's buffer when issued. The target applies requests one at a time, whole,
//! in the order each origin sent them (messages between two ranks in one context do not
//! overtake), so accumulates of one operation and type are atomic, as MPI requires. Replies
//! (tag `REPLY`) carry a get's data, a fetching operation's old values, a lock's grant, the
//! end of an unlock or flush, and `post`'s notice.
//!
//! Progress: a window is served whenever this rank is inside mpirt. The window's own calls
//! (epoch ends, flushes, lock and unlock, `with_local`) serve it while they wait and once
//! more when they are done with it (`Served`), and a progress hook (`backend::hooks`) serves
//! every window whenever the PML moves in any other
//! blocking call or test (a receive, a collective, a request's wait). A target that computes
//! outside mpirt delays a passive-target origin until its next call: there is no progress
//! thread, since the runtime is one thread's (`Threading::Funneled`).

use std::cell::{Cell, RefCell, RefMut};
use std::ops::{Deref, DerefMut};
use std::rc::{Rc, Weak};
use std::sync::Arc;

use pml::fast_hash::FastMap;
use pml::{Handle, Pml, SendMode, SourceSel, TagSel};

use super::fault::WindowFault;
use super::target::{Reply, Target};
use super::wire::{decode_reply, Answer, Request, HEADER, REPLY, REQUEST};
use crate::backend::hooks::{self, HookId};
use crate::communicator::CommData;
use crate::datatype::layout::Layout;
use crate::datatype::Datatype;
use crate::environment::{self, with_engine_or_lent};
use crate::error::Cause;

/// Where a reply's data goes: an origin buffer lent to the epoch.
pub(super) enum Destination {
    /// `len` bytes at the pointer, as they came (a contiguous buffer).
    Bytes(*mut u8, usize),
    /// `count` elements of `layout` at `base`, unpacked from the reply once its values are
    /// valid for `datatype` (a typed get's or get_accumulate's buffer, of any layout): the
    /// data lands where it arrives, so that the request need not be waited for to unpack it.
    Unpacked {
        base: *mut u8,
        count: usize,
        datatype: Datatype,
        layout: Arc<Layout>,
    },
}

impl Destination {
    /// Puts a reply's `payload` where it goes, or says why it may not.
    ///
    /// # Safety
    /// As for [`Core::request`]'s destination: valid for writes of its bytes (its elements'
    /// span), and accessed by nothing else.
    unsafe fn fill(&self, payload: &[u8]) -> Result<(), &'static str> {
        match *self {
            Destination::Bytes(ptr, len) if len == payload.len() => {
                // SAFETY: the function's contract.
                unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), ptr, len) };
                Ok(())
            }
            Destination::Unpacked {
                base,
                count,
                datatype,
                ref layout,
            } if count.checked_mul(layout.size) == Some(payload.len()) => {
                if !datatype.is_valid(payload) {
                    return Err("a reply holding invalid values for the origin's datatype");
                }
                // SAFETY: the function's contract makes `base` valid for writes of the span
                // of `count` elements, apart from `payload` (the reply's own bytes), which
                // is their packed size with valid values.
                unsafe { layout.unpack(count, base, payload) };
                Ok(())
            }
            _ => Err("a reply of the wrong length"),
        }
    }
}

/// A reply an origin waits for.
struct Awaited {
    /// Where its data goes (a get's origin buffer, lent to the epoch).
    into: Option<Destination>,
    /// Whether its data, of any length, is kept here for `take_kept` (an answer about a
    /// dynamic window's attached memory), and the data once it came.
    keeps: bool,
    kept: Vec<u8>,
    target: u32,
    /// Set when the reply came: its outcome.
    outcome: Option<Result<(), WindowFault>>,
    /// Whether a request (`rget`, ...) will take the outcome itself: a flush leaves it.
    held: bool,
}

/// One window's messaging state on this rank, as origin and as target.
pub(super) struct Core {
    pub comm: CommData,
    pub target: Target,
    /// By id: a multiplicative hash (SipHash's cost a lookup, about 100 instructions, came
    /// to a tenth of an origin's put and flush over TCP, callgrind).
    awaited: FastMap<u64, Awaited>,
    next_id: u64,
    /// Per target, the `post` notices received that no `start` has consumed yet.
    pub posted: Vec<u32>,
    /// Frames in flight, kept until their send completes.
    sending: Vec<(Handle, Vec<u8>)>,
    /// The first fault a target reported for a request that wanted no reply (a put, an
    /// accumulate), for the end of the epoch to report.
    late_fault: Option<WindowFault>,
    /// Per target, the last put or accumulate issued to it, held back while it is short
    /// (`HELD_DATA`) until the next request to that target sends it first, so that a
    /// flush can ask for its answer instead of sending a message of its own: a put and its
    /// flush are then one round trip, two messages, not three (a flush's message cost over
    /// TCP as much as the put's).
    held: Vec<Option<Vec<u8>>>,
    /// Per target, whether a request that asks nothing back went to it after the last one
    /// that asked (whose answer comes after the target applied everything before it): only
    /// then does a flush need to ask the target anything.
    unanswered: Vec<bool>,
    /// The buffer the last request or reply was received into, kept for the next one (up
    /// to `KEPT_INBOX` bytes): an allocation and a free less for every message.
    inbox: Vec<u8>,
    /// What the PML had moved when `receive` last found nothing queued for this window
    /// (none before the first look, and under UCX): until it moves more, nothing new can be
    /// queued, and `serve_if_moved` need not look.
    looked: Option<pml::MovedMark>,
}

/// The largest receive buffer a window keeps between messages.
const KEPT_INBOX: usize = 64 << 10;

/// The most data (besides its header) a request held back for the flush after it carries:
/// a short put's message costs about as much as a flush's, while a long one should start
/// moving at once, beside the origin's computation. A 4 KiB put is short: sent at once, it
/// and its flush were three messages where Open MPI's osc pt2pt sends two (strace).
const HELD_DATA: usize = 4096;

impl Core {
    pub fn new(comm: CommData, target: Target) -> Core {
        let size = comm.size as usize;
        Core {
            comm,
            target,
            awaited: FastMap::default(),
            next_id: 1,
            posted: vec![0; size],
            sending: Vec::new(),
            late_fault: None,
            held: vec![None; size],
            unanswered: vec![false; size],
            inbox: Vec::new(),
            looked: None,
        }
    }

    fn send(&mut self, to: u32, tag: i32, frame: Vec<u8>) -> Result<(), Cause> {
        let (context, source, peer) = (self.comm.context, self.comm.rank, self.comm.world_rank(to));
        // SAFETY: the frame is kept in `sending` (its heap block does not move) until the
        // send completes.
        let handle = with_engine_or_lent(|e| unsafe {
            e.post_send(
                context,
                source,
                peer,
                tag,
                SendMode::Standard,
                frame.as_ptr(),
                frame.len(),
            )
        })?;
        if handle != Handle::SENT {
            self.sending.push((handle, frame));
        }
        Ok(())
    }

    /// Sends a request to `target`; `reply` says whether one is awaited, and where its data
    /// goes. Returns the id to wait for (0 when none).
    ///
    /// # Safety
    /// The destination, where given, must stay valid for writes of its bytes (an
    /// `Unpacked` one: of its elements' span), and be accessed by nothing else, until the
    /// reply came (`done` said so), `abandon`, or the window is gone.
    pub unsafe fn request(
        &mut self,
        target: u32,
        mut request: Request,
        payload: &[&[u8]],
        reply: Option<Option<Destination>>,
    ) -> Result<u64, Cause> {
        request.id = match reply {
            Some(into) => self.await_reply(target, into),
            None => 0,
        };
        let frame = request.encode(payload);
        let t = target as usize;
        if request.id == 0
            && request.ask.answers_only_when_asked()
            && frame.len() <= HEADER + HELD_DATA
        {
            self.unanswered[t] = true;
            if let Some(earlier) = self.held[t].replace(frame) {
                self.send(target, REQUEST, earlier)?;
            }
            return Ok(0);
        }
        // What was held goes first: a target applies an origin's requests in order.
        if let Some(earlier) = self.held[t].take() {
            self.send(target, REQUEST, earlier)?;
        }
        self.unanswered[t] = request.id == 0;
        self.send(target, REQUEST, frame)?;
        Ok(request.id)
    }

    /// A new id whose reply from `target` is awaited, its data going `into` (see
    /// `request`).
    fn await_reply(&mut self, target: u32, into: Option<Destination>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.awaited.insert(
            id,
            Awaited {
                into,
                keeps: false,
                kept: Vec::new(),
                target,
                outcome: None,
                held: false,
            },
        );
        id
    }

    /// Makes sure that `target` answers once it applied every request this rank sent it:
    /// asks it by the put or accumulate held back for it, or by a flush request where a
    /// request that asks nothing went since the last that asked. Returns the id whose answer
    /// says so, if one was asked for; the answers to requests that asked say so too (see
    /// `all_done`).
    pub fn flush_request(&mut self, target: u32, flush: Request) -> Result<Option<u64>, Cause> {
        let t = target as usize;
        if let Some(mut frame) = self.held[t].take() {
            let id = self.await_reply(target, None);
            Request::set_id(&mut frame, id);
            self.unanswered[t] = false;
            self.send(target, REQUEST, frame)?;
            return Ok(Some(id));
        }
        if !self.unanswered[t] {
            return Ok(None);
        }
        // SAFETY: a flush's answer carries no data.
        unsafe { self.request(target, flush, &[], Some(None)) }.map(Some)
    }

    /// Sends a request whose reply's data this keeps, whatever its length, for
    /// `take_kept`; returns the id to wait for.
    pub fn request_kept(&mut self, target: u32, request: Request) -> Result<u64, Cause> {
        // SAFETY: the reply's data goes to no buffer of the caller's.
        let id = unsafe { self.request(target, request, &[], Some(None)) }?;
        // Set before any reply is delivered: only `serve_queued`, under this borrow, delivers.
        self.awaited.get_mut(&id).expect("just awaited").keeps = true;
        Ok(id)
    }

    /// The outcome of the reply `id` of `request_kept`, with its data, once it came (then
    /// forgotten).
    pub fn take_kept(&mut self, id: u64) -> Option<Result<Vec<u8>, WindowFault>> {
        let awaited = self.awaited.get_mut(&id)?;
        let outcome = awaited.outcome.take()?;
        let kept = std::mem::take(&mut awaited.kept);
        self.awaited.remove(&id);
        Some(outcome.map(|()| kept))
    }

    /// Sends `post`'s notice to an origin.
    pub fn notify_posted(&mut self, origin: u32) -> Result<(), Cause> {
        self.send(
            origin,
            REPLY,
            super::wire::encode_reply(Answer::Posted, 0, &[]),
        )
    }

    /// The outcome of the reply `id`, once it came (then forgotten).
    pub fn take(&mut self, id: u64) -> Option<Result<(), WindowFault>> {
        let outcome = self.awaited.get_mut(&id)?.outcome.take()?;
        self.awaited.remove(&id);
        Some(outcome)
    }

    /// Leaves the outcome of `id` to its request (`take`), or, with `held` false, to the
    /// end of the epoch again (the request was dropped unwaited).
    pub fn hold(&mut self, id: u64, held: bool) {
        if let Some(awaited) = self.awaited.get_mut(&id) {
            awaited.held = held;
        }
    }

    pub fn is_done(&self, id: u64) -> bool {
        self.awaited.get(&id).is_none_or(|a| a.outcome.is_some())
    }

    /// Whether every reply awaited from `target` (every target: `None`) came.
    pub fn all_done(&self, target: Option<u32>) -> bool {
        self.awaited
            .values()
            .all(|a| a.outcome.is_some() || target.is_some_and(|t| t != a.target))
    }

    /// Takes the outcomes of the replies that came from `target` (every target: `None`):
    /// the first fault among them and among late faults, if any. At an epoch's end
    /// (`ending`) it takes those of held requests too: a request cannot outlive its epoch, so
    /// one still held was forgotten (`mem::forget`) and would never take them.
    pub fn settle(&mut self, target: Option<u32>, ending: bool) -> Result<(), WindowFault> {
        let mut first = self.late_fault.take().map(Err).unwrap_or(Ok(()));
        self.awaited.retain(|_, a| {
            if target.is_some_and(|t| t != a.target) || a.outcome.is_none() || (a.held && !ending) {
                return true;
            }
            if first.is_ok() {
                first = a.outcome.take().expect("checked above");
            }
            false
        });
        first
    }

    /// Takes one message queued on the window's context, if one is: its source, tag and
    /// bytes (in the buffer `inbox` lends, for `give_back`). On the native PML it makes no
    /// progress (under UCX the probe progresses the worker): a message still on its way is
    /// left to the next round of progress, which serves the window.
    /// Where none is queued, it notes what the PML had moved then (`looked`).
    fn receive(&mut self) -> Result<Option<(u32, i32, Vec<u8>)>, Cause> {
        let context = self.comm.context;
        // The mark is taken in the look's own hold of the engine: at `Multiple`, a round of
        // another thread between a look and a later mark would queue a request that the
        // mark counts as seen, and `serve_if_moved` would skip it until the PML moved again.
        let (mark, found) = with_engine_or_lent(|e| {
            let mark = e.moved_mark();
            Ok((
                mark,
                e.matched_probe_queued(context, SourceSel::Any, TagSel::Any)?,
            ))
        })?;
        let Some((message, status)) = found else {
            self.looked = mark;
            return Ok(None);
        };
        let mut frame = std::mem::take(&mut self.inbox);
        frame.clear();
        frame.resize(status.len, 0);
        // SAFETY: `frame` is valid for writes of its length and not otherwise accessed until
        // the receive, waited for at once, completed.
        let handle = with_engine_or_lent(|e| unsafe {
            e.post_matched_recv(message, frame.as_mut_ptr(), frame.len())
        })?;
        // A short message is here whole, and its receive done as posted: only a long one
        // (a rendezvous) is waited for, which steps the progress hooks.
        if with_engine_or_lent(|e| e.collect(handle))?.is_none() {
            environment::wait_or_lent(handle)?;
        }
        Ok(Some((status.source, status.tag, frame)))
    }

    /// Keeps a received frame's buffer for the next `receive`, unless it is long.
    fn give_back(&mut self, frame: Vec<u8>) {
        if frame.capacity() <= KEPT_INBOX {
            self.inbox = frame;
        }
    }

    /// One round of progress, then `serve_queued`: for the calls that look for what came
    /// without waiting (`RmaRequest::test`, `with_local`, a lock word's tries), which nothing
    /// else moves.
    pub fn drain(&mut self) -> Result<(), Cause> {
        with_engine_or_lent(|e| e.progress())?;
        self.serve_queued()
    }

    /// Serves what has arrived for this window: applies requests (sending their replies) and
    /// takes replies; forgets finished sends. It ends with a look that found nothing, so
    /// every message that reached this rank's queues before that look was served: one that
    /// came while the window was its owner's (the hook skips it then) is not left behind.
    /// It makes no progress: its callers come after a round that did (the hook, a wait) or
    /// need only what is queued (`Served`), and a round is a system call over TCP (an
    /// origin's put and flush made five, each looking for nothing, on the way from one
    /// operation's answer to the next operation).
    pub fn serve_queued(&mut self) -> Result<(), Cause> {
        let mut i = 0;
        while i < self.sending.len() {
            let handle = self.sending[i].0;
            if with_engine_or_lent(|e| e.collect(handle))?.is_some() {
                self.sending.swap_remove(i);
            } else {
                i += 1;
            }
        }
        let mut replies: Vec<Reply> = Vec::new();
        while let Some((source, tag, frame)) = self.receive()? {
            if tag == REQUEST {
                self.target.apply(source, &frame, &mut replies);
                self.give_back(frame);
                for reply in replies.drain(..) {
                    self.send(reply.to, REPLY, reply.frame)?;
                }
            } else {
                self.deliver(source, &frame);
                self.give_back(frame);
            }
        }
        Ok(())
    }

    /// `serve_queued`, unless the PML moved nothing since its last look found nothing (a
    /// look costs a wildcard probe: an origin's put and flush looked four times for the one
    /// answer they wait for).
    pub fn serve_if_moved(&mut self) -> Result<(), Cause> {
        let looked = self.looked;
        if with_engine_or_lent(|e| Ok(e.moved_since(looked)))? {
            self.serve_queued()?;
        }
        Ok(())
    }

    fn deliver(&mut self, target: u32, frame: &[u8]) {
        let refused = |why: &[u8]| WindowFault::Refused {
            target: target as i32,
            why: String::from_utf8_lossy(why).into_owned(),
        };
        let Some((answer, id, payload)) = decode_reply(frame) else {
            self.late_fault
                .get_or_insert(refused(b"a malformed one-sided reply"));
            return;
        };
        if answer == Answer::Posted {
            self.posted[target as usize] += 1;
            return;
        }
        let Some(awaited) = self.awaited.get_mut(&id) else {
            // A fault for a request that wanted no reply.
            self.late_fault.get_or_insert(refused(payload));
            return;
        };
        awaited.outcome = Some(match (answer, awaited.into.as_ref()) {
            (Answer::Fault, _) => Err(refused(payload)),
            // SAFETY: `request`'s contract keeps the destination valid for writes, and
            // untouched by anything else, until this reply came.
            (Answer::Data, Some(into)) => {
                unsafe { into.fill(payload) }.map_err(|why| refused(why.as_bytes()))
            }
            (Answer::Data, None) if awaited.keeps => {
                awaited.kept = payload.to_vec();
                Ok(())
            }
            _ => Ok(()),
        });
    }

    /// Serves the window until `done` holds, sleeping in the PML between messages.
    pub fn wait_until(&mut self, done: impl Fn(&Core) -> bool) -> Result<(), Cause> {
        self.serve_if_moved()?;
        loop {
            if done(self) {
                return Ok(());
            }
            // Everything that makes `done` hold arrives as a message on this context, which
            // the waiting loop waits for; its hook skips this window meanwhile (it is
            // borrowed), so nothing else takes the message first, and serves the others. The
            // look moves nothing (`probe_queued`, not `iprobe`): the wait's rounds do, and at
            // `Serialized` and `Multiple` what a look moved would wake no paused thread.
            let context = self.comm.context;
            environment::wait_until_or_lent(pml::stall::Awaited::State, |e| {
                Ok(e.probe_queued(context, SourceSel::Any, TagSel::Any)?
                    .is_some())
            })?;
            // What the wait found is served whatever the PML's counts say.
            self.serve_queued()?;
        }
    }

    /// Drops the destinations of the awaited data that `abandoned` picks (by id and
    /// target): an epoch whose closure panicked gives its buffers back to the unwinding
    /// caller, and replies to them that come later are discarded. The others stay: a lock
    /// epoch open around the one that unwound still waits for its own replies.
    pub fn abandon(&mut self, abandoned: impl Fn(u64, u32) -> bool) {
        for (&id, awaited) in &mut self.awaited {
            if abandoned(id, awaited.target) {
                awaited.into = None;
            }
        }
    }

    /// Before the window is freed: makes sure that every target applied every request this
    /// rank sent it, then waits until every frame this rank sent on the window has left. A
    /// request that asked for no answer (an unwound epoch's unlock and the puts it held
    /// back, `with_local`'s release of this rank's own lock) may still be
    /// on its way, or in this rank's loopback, which only a round of progress delivers; a
    /// target that freed the window before it came would leave it queued on the freed
    /// context, where the next window made (it takes the lowest free context, this one)
    /// would take it as its own: an unlock of a lock it never granted. So each target whose
    /// last request asked nothing gets a flush, whose answer comes once everything before it
    /// was applied (a fault an earlier request caused comes before it). `flush` is the flush
    /// request; none on the shared-memory path: its locks
    /// are lock words and its only messages (`post`'s notices, `complete`'s markers) are
    /// consumed by the epochs they end, so nothing is left to apply, and its window is not
    /// served by the progress hook (`forget`; the target's own window calls alone serve
    /// it), so a target already in the free's barrier would never answer a flush: the
    /// origins would wait for it, and the barrier for them (its rank polls its PML, asleep
    /// or not, but nothing applies the request). Nothing is held back there either (its puts
    /// and accumulates are stores); what is held is sent all the same.
    ///
    /// Returns, inside, the first fault that no epoch reported: a target's refusal of an
    /// operation whose epoch unwound (its end, which reports faults, never ran), which
    /// arrives before the free's flush is answered. The free reports it once every rank is
    /// done with the window; the outer error is a failure of messaging itself.
    pub fn finish(&mut self, flush: Option<Request>) -> Result<Result<(), WindowFault>, Cause> {
        let mut ids = Vec::new();
        for target in 0..self.held.len() as u32 {
            match flush {
                Some(flush) => ids.extend(self.flush_request(target, flush)?),
                None => {
                    if let Some(frame) = self.held[target as usize].take() {
                        self.send(target, REQUEST, frame)?;
                    }
                }
            }
        }
        self.wait_until(|core| ids.iter().all(|&id| core.is_done(id)))?;
        // The flushes' own outcomes (a put held back and sent as one carries its fault) and
        // the late faults; requests that unwound epochs forgot are settled with them.
        let faults = self.settle(None, true);
        while let Some((handle, _frame)) = self.sending.last() {
            let handle = *handle;
            environment::wait_or_lent(handle)?;
            self.sending.pop();
        }
        Ok(faults)
    }
}

/// A window's core lent to its owner's call. When the call is done with it, it serves what
/// arrived meanwhile: the progress hook skips a borrowed window, and a message that reached
/// this rank then would otherwise wait until the PML moves again, which may be never (every
/// rank waiting for the others).
pub(super) struct Served<'a>(RefMut<'a, Core>);

/// Lends the window's core to a call; refused while `with_local` holds it (a window call
/// inside its closure).
pub(super) fn serve(core: &RefCell<Core>) -> Result<Served<'_>, Cause> {
    core.try_borrow_mut().map(Served).map_err(|_| {
        Cause::Window(WindowFault::Synchronisation(
            "the window's memory is lent to with_local; use the window outside it".into(),
        ))
    })
}

impl Deref for Served<'_> {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.0
    }
}

impl DerefMut for Served<'_> {
    fn deref_mut(&mut self) -> &mut Core {
        &mut self.0
    }
}

impl Drop for Served<'_> {
    fn drop(&mut self) {
        // A failure of messaging stops the PML, and the next call meets it again.
        if !std::thread::panicking() {
            let _ = self.0.serve_if_moved();
        }
    }
}

thread_local! {
    /// The windows of this thread, which the progress hook serves.
    static WINDOWS: RefCell<Vec<Weak<RefCell<Core>>>> = const { RefCell::new(Vec::new()) };
    static HOOK: Cell<Option<HookId>> = const { Cell::new(None) };
}

/// Has the progress hook serve `core` until `forget`.
pub(super) fn register(core: &Rc<RefCell<Core>>) {
    WINDOWS.with(|w| w.borrow_mut().push(Rc::downgrade(core)));
    if HOOK.with(Cell::get).is_none() {
        HOOK.with(|h| h.set(Some(hooks::register(serve_all))));
    }
}

pub(super) fn forget(core: &Rc<RefCell<Core>>) {
    let gone = Rc::as_ptr(core);
    // During thread-local teardown there is nothing left to serve.
    let _ = WINDOWS.try_with(|w| {
        let mut windows = w.borrow_mut();
        windows.retain(|weak| weak.as_ptr() != gone);
        if windows.is_empty() {
            if let Some(id) = HOOK.with(Cell::take) {
                hooks::unregister(id);
            }
        }
    });
}

/// The progress hook: serves every window not borrowed by its owner's own call (which
/// serves it itself). A failure stays for the owner's next call to meet: messaging failures
/// stop the PML, which reports them again.
fn serve_all() {
    let mut i = 0;
    while let Some(weak) = WINDOWS.with(|w| w.borrow().get(i).cloned()) {
        i += 1;
        if let Some(core) = weak.upgrade() {
            if let Ok(mut core) = core.try_borrow_mut() {
                let _ = core.serve_if_moved();
            }
        }
    }
}
