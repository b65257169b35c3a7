%% @doc One copy of a replica group under DottedDB replication, pure: the node-wide dot clocks
%% of *DottedDB: Anti-Entropy without Merkle Trees, Deletes without Tombstones* (§IV, the
%% "Node-wide Dot-based Clocks" framework; Algorithms 1 to 3), which a thin runtime server
%% and the simulator both run. State in, new state and effects out.
%%
%% == What a copy holds (§IV.D) ==
%% <ul>
%% <li>the node clock: every dot this copy has seen ({@link hm_node_clock}, base + bitmap);</li>
%% <li>storage: per key an object `{Versions, Context}': each live version a dot and a value
%% (a delete is a version without value), and the causal context stripped of what the node
%% clock's contiguous bases already say;</li>
%% <li>the dot-key map: the key of every locally stored version's dot, until every copy of
%% the group is known to have the dot (what anti-entropy looks up);</li>
%% <li>the watermark: per copy of the group, the bases of its node clock last heard of;</li>
%% <li>the non-stripped keys: keys whose stored context is not empty yet.</li>
%% </ul>
%%
%% == Steps (named as in the paper) ==
%% <ul>
%% <li>{@link put/4}, {@link delete/3} (Algorithm 1 PUT, DELETE): a fresh dot of this copy, the
%% new version with the client's context (from a {@link get/2} or {@link merge_replies/1}),
%% `update' (merge with the local object and `store'), then the object is sent to every other
%% copy (replicate on write). A put with the context of a get replaces exactly the versions
%% that get returned; versions it did not see stay as concurrent siblings. A delete is a put
%% without value: once its context is stripped, nothing of the key is left (no tombstone: the
%% node clock remembers the deleted dots).</li>
%% <li>{@link fetch/2} (Algorithm 2 `fetch'): the object with its context filled from the node
%% clock's bases; {@link merge_replies/1} merges R copies' replies into the records and an
%% opaque context (Algorithm 1 GET).</li>
%% <li>`store' (Algorithm 2): strip, drop the key when no value and no context are left, add
%% the version dots to the node clock and the dot-key map, track non-stripped keys.</li>
%% <li>{@link timeout/2} of `strip' (Algorithm 3 `strip_causality'): store every non-stripped
%% key again.</li>
%% <li>{@link timeout/2} of `anti_entropy' (Algorithm 3): send the node clock to a random
%% other copy (`sync_clock'); it answers (`sync_repair') with only the objects of dots the
%% sender lacks, found through its dot-key map, and names those dots (as a clock; with their
%% keys only for dots no sent version carries); the receiver merges the objects, adds the
%% named dots to its node clock and its dot-key map, so it can answer for them in turn (the
%% paper adds the answering copy's own entry; the copies of one group hold the same keys, so
%% naming the dots closes the gaps of every id, superseded versions' included), updates the
%% watermark and drops dot-key entries every copy has. With `{anti_entropy, merkle}' the
%% periodic exchange is instead the Merkle-tree baseline of {@link hm_merkle} over the same
%% objects (levels compared, then the differing keys' objects exchanged both ways; a copy
%% whose root equals the sender's shows the same versions, so it takes the sender's node
%% clock).</li>
%% <li>`update' (Algorithm 2) also counts an incoming version found obsolete as seen: its
%% dot goes to the node clock and the dot-key map, as its key's object reflects it.</li>
%% </ul>
%%
%% == Churn ==
%% A copy replaced by a new node id: {@link set_peers/2} on every copy. The old id leaves the
%% watermark; a new copy (option `bootstrap') first asks a peer for all its objects and node
%% clock and dot-key map (a handoff; a key it holds that the peer does not is one the peer
%% deleted, and is merged as such), and is `syncing' until it has them. A copy asked that is
%% syncing itself refuses, and the new copy asks another one at once (or, when every other
%% copy refused, at its next anti-entropy tick). A retired id's dots may stay in contexts
%% with gaps no copy can fill (a write it made that reached nobody): once every remaining
%% copy, having retired the id too, has shown in an exchange that it holds no dot of it this
%% copy lacks, no dot of it can still arrive, and strip drops its entries. A context
%% naming an id that is neither in the group nor retired (a copy that joined after the id
%% left) retires it the same way. An id back in the group (a node holding a copy of the group
%% again: it starts with `bootstrap', so its dots continue after its old ones) is live again
%% and leaves the retired ids. So per-key clocks never keep an entry for a node that is
%% gone: they converge to the ids of the live versions' dots.
%%
%% == Incarnations ==
%% A copy that loses its state (the runtime's copies live in their process) comes back as a
%% new copy at the same address: ids `{Address, Incarnation}' (an integer; {@link
%% address/1}, {@link incarnation/1}). The group is then given by address ({@link new/1},
%% {@link set_peers/2}): an address stands for the id known there, or for the placeholder
%% `{Address, 0}' until a copy is heard from. A message from (or naming, in its sender's
%% group or in a context) a higher incarnation at an address of the group supersedes the id
%% known there: the old id is retired as a replaced copy's (a placeholder just goes), and
%% messages from it are dropped. A retired id waits for the copies at the group's addresses,
%% following each to its newest incarnation. A copy that lost its state lacks dots every copy
%% had, which the dot-key maps no longer name: a `sync_clock' showing such a gap is answered
%% with the whole state, as a handoff. Once a retired id is closed, repairs name every dot of
%% it up to the highest the sender holds, gaps included (no copy holds a dot in a gap): its
%% entry is gone from the stored contexts, and a copy still showing a version of it that was
%% superseded elsewhere must see that it is. Ids without the `{Address, Incarnation}' shape
%% are their own address and never superseded.
%%
%% == Effects ==
%% <ul>
%% <li>`{send, Peer, Msg}': give `Msg' to {@link handle/2} of copy `Peer';</li>
%% <li>`{timer, Ms, Msg}': give `Msg' to {@link timeout/2} in `Ms' ms (`strip' and
%% `anti_entropy', each re-armed by its own timeout);</li>
%% <li>`{show, Key, Values}': reads of `Key' must now show `Values' (a Mnesia table mirrors
%% them; `[]': the key is gone);</li>
%% <li>`{drop, Reason}': a message was dropped (malformed, or from a copy not in the group);</li>
%% <li>`{event, {store, Key, Info}}' (only with option `events'): what the simulator and the
%% benchmark measure at every store: `entries' (node ids in the stored object's clock),
%% `dots' (its live version dots), `stripped' (its context is empty), `removed'.</li>
%% </ul>
%%
%% == Where each step lives ==
%% This module keeps the API: it starts a copy, takes client requests, dispatches timers and
%% peers' messages, and answers inspection. The steps live in modules of their own, all pure
%% over the same state (`hm_dotted.hrl'):
%% <ul>
%% <li>{@link hm_dotted_store}: Algorithm 2 (`update', `store', `strip', `fill') and
%% Algorithm 3's `strip_causality';</li>
%% <li>{@link hm_dotted_sync}: anti-entropy, the node-clock exchange of Algorithm 3
%% (`sync_clock', `sync_repair', the watermark and the dot-key map's collection) and the
%% Merkle baseline's exchange;</li>
%% <li>{@link hm_dotted_churn}: the group by address and incarnation, retired ids, and the
%% handoff that bootstraps a new copy.</li>
%% </ul>
%%
%% == Driving it from a server ==
%% Start with {@link new/1} and carry out its effects (the two timers, and a handoff request
%% for a bootstrapping copy). Client requests: {@link put/4}, {@link delete/3}, {@link get/2}
%% (or {@link fetch/2} on R copies and {@link merge_replies/1} at the coordinator). Messages
%% from peers: {@link handle/2}. Timers: {@link timeout/2}. Group changes: {@link set_peers/2}.
%% A copy restarted from its saved state calls {@link recover/1} to re-arm its timers. The
%% anti-entropy peer is drawn from a random state kept in the state (option `seed'), so a run
%% is a function of its inputs.
%%
%% Invariants: every live version's dot is in the node clock; a stored context holds no entry
%% whose dots the node clock's base covers after a strip; a key with neither a value nor a
%% context is not stored; every dot in the node clock is reflected in the objects (live, or
%% superseded by what is stored); a dot-key entry is dropped only when the watermark (for a
%% retired id: the clocks last heard from every other copy) shows every current copy has the
%% dot; what `show' last said for a key is the values of its versions.
-module(hm_dotted).

-export([new/1, put/4, delete/3, get/2, fetch/2, merge_replies/1, new_context/0,
         handle/2, timeout/2, set_peers/2, recover/1]).
-export([address/1, incarnation/1]).
-export([id/1, peers/1, status/1, node_clock/1, objects/1, values/1, clock_entries/2,
         metadata/1, metadata_bytes/1, non_stripped/1, dot_keys/1, tree/1, anti_entropy/1,
         object_bytes/1]).
-export_type([state/0, effect/0, msg/0, context/0, reply/0, opts/0, id/0, address/0]).

-include("hm_dotted.hrl").

-type id() :: term().
-type address() :: term().
-type context() :: binary().
-opaque reply() :: {dotted_reply, obj()}.
-type msg() :: {replicate, id(), term(), obj()}
             | {sync_clock, id(), [id()], hm_node_clock:clock()}
             | {sync_repair, id(), [id()], hm_node_clock:clock(), [{term(), obj() | none}],
                {resolved, hm_node_clock:clock(), [{dot(), term()}]}
                | {full, [{dot(), term()}]}}
             | {transfer_req, id()}
             | {transfer_refused, id()}
             | {merkle, id(), [id()], hm_node_clock:clock(), hm_merkle:msg()}
             | {merkle_repair, id(), [id()], hm_node_clock:clock(), [{term(), obj() | none}],
                [term()]}.
-type effect() :: {send, id(), msg()} | {timer, pos_integer(), strip | anti_entropy}
                | {show, term(), [term()]} | {drop, term()} | {event, term()}.
-type opts() :: #{id := id(), peers := [id()], seed => integer(),
                  anti_entropy => node_clock | merkle, merkle => hm_merkle:shape(),
                  strip_interval => pos_integer(), sync_interval => pos_integer(),
                  bootstrap => boolean(), events => boolean()}.
-opaque state() :: #d{}.

%%% ================================================================ starting

%% @doc A copy of a group: `id' (this copy's id, never reused by another copy: an
%% incarnation `{Address, Incarnation}' or a plain id), `peers' (every copy of the group, by
%% address or by id, see "Incarnations"), `seed' (the anti-entropy peer choice), `anti_entropy'
%% (`node_clock', the default, or `merkle'), `merkle' (the tree shape, see {@link hm_merkle}),
%% `strip_interval' and `sync_interval' in ms (default 1000 each), `bootstrap' (a new copy of
%% a group that already holds data: it asks a peer for a handoff first), `events'.
-spec new(opts()) -> {state(), [effect()]}.
new(O = #{id := Id, peers := Peers0}) ->
    AE = maps:get(anti_entropy, O, node_clock),
    S = #d{id = Id, peers = lists:usort([Id | hm_dotted_churn:to_ids(Peers0, Id, [Id])]),
           nc = hm_node_clock:new(),
           ae = AE,
           tree = case AE of
                      merkle -> hm_merkle:new(maps:get(merkle, O, #{fanout => 16, depth => 3}));
                      node_clock -> undefined
                  end,
           strip_ms = maps:get(strip_interval, O, 1000),
           sync_ms = maps:get(sync_interval, O, 1000),
           rand = rand:seed_s(exsss, {erlang:phash2(Id), maps:get(seed, O, 1), 16#d07}),
           ready = not maps:get(bootstrap, O, false),
           events = maps:get(events, O, false)},
    {S1, Handoff} = case S#d.ready of
                        true -> {S, []};
                        false -> hm_dotted_churn:ask_handoff(S)
                    end,
    {S1, timers(S1) ++ Handoff}.

timers(#d{strip_ms = St, sync_ms = Sy}) -> [{timer, St, strip}, {timer, Sy, anti_entropy}].

%% @doc A copy restarted from its saved state: its timers again (the runtime lost them).
-spec recover(state()) -> {state(), [effect()]}.
recover(S = #d{ready = false}) ->
    {S1, Effs} = hm_dotted_churn:ask_handoff(S),
    {S1, timers(S1) ++ Effs};
recover(S) -> {S, timers(S)}.

%%% ================================================================ client requests

%% @doc The empty context: a write that supersedes nothing (a blind write).
-spec new_context() -> context().
new_context() -> hm_node_clock:encode(hm_node_clock:new()).

%% @doc PUT (Algorithm 1): write `Value' under `Key', superseding what `Context' (from a get)
%% says the client saw. `{error, bad_context}' for a context no get produced.
-spec put(term(), term(), context(), state()) -> {state(), [effect()]} | {error, bad_context}.
put(Key, Value, Ctx, S) -> write(Key, {v, Value}, Ctx, S).

%% @doc DELETE (Algorithm 1): a put without value. Versions the context does not name are
%% concurrent with the delete and stay.
-spec delete(term(), context(), state()) -> {state(), [effect()]} | {error, bad_context}.
delete(Key, Ctx, S) -> write(Key, ?NULL, Ctx, S).

write(Key, Version, Ctx0, S = #d{id = Id, nc = NC}) ->
    case decode_context(Ctx0) of
        {error, _} = E -> E;
        {ok, Ctx} ->
            {Dot, _} = hm_node_clock:next_dot(Id, NC),
            Obj = {#{Dot => Version}, hm_node_clock:add(Dot, Ctx)},
            {_, StoredCtx} = hm_dotted_store:stored(Key, S),
            {{Vers, _}, S1, Effs} = hm_dotted_store:update(Key, Obj, S),
            %% what is sent: the merged versions with the client's context, what the stored
            %% context still held, and the bases of the ids that matter for this key
            Send = {Vers, hm_dotted_store:fill(hm_node_clock:join(element(2, Obj), StoredCtx),
                                               Vers, S1)},
            {S1, Effs ++ [{send, P, {replicate, Id, Key, Send}}
                          || P <- hm_dotted_churn:others(S1)]}
    end.

decode_context(B) when is_binary(B) ->
    case hm_node_clock:decode(B) of
        {ok, C} -> {ok, C};
        {error, _} -> {error, bad_context}
    end;
decode_context(_) -> {error, bad_context}.

%% @doc `fetch' (Algorithm 2): this copy's object for `Key', its context filled from the
%% node clock, as a reply for {@link merge_replies/1}.
-spec fetch(term(), state()) -> reply().
fetch(Key, S) ->
    {Vers, Ctx} = hm_dotted_store:stored(Key, S),
    {dotted_reply, {Vers, hm_dotted_store:fill(Ctx, Vers, S)}}.

%% @doc GET with a read quorum of 1: {@link fetch/2} here, then {@link merge_replies/1}.
-spec get(term(), state()) -> {[term()], context()}.
get(Key, S) -> merge_replies([fetch(Key, S)]).

%% @doc The GET coordinator's `reduce(O, merge)': R copies' replies merged into the values of
%% the concurrent versions (in dot order) and an opaque context for a later put or delete.
-spec merge_replies([reply(), ...]) -> {[term()], context()}.
merge_replies(Replies = [_ | _]) ->
    {Vers, Ctx} = lists:foldl(fun({dotted_reply, O}, Acc) -> hm_dotted_store:merge(O, Acc) end,
                              {#{}, hm_node_clock:new()}, Replies),
    {hm_dotted_store:shown(Vers), hm_node_clock:encode(Ctx)}.

%%% ================================================================ timers

%% @doc A timer went off: `strip' (strip_causality, {@link hm_dotted_store}) or
%% `anti_entropy' (an exchange with a random other copy, {@link hm_dotted_sync}; a
%% bootstrapping copy asks for its handoff again, after 2, 4, 8 and at most 16 ticks: each
%% answer is a peer's whole state, {@link hm_dotted_churn}). Each re-arms itself.
-spec timeout(strip | anti_entropy | term(), state()) -> {state(), [effect()]}.
timeout(strip, S) ->
    {S1, Effs} = hm_dotted_store:strip_causality(S),
    {S1, Effs ++ [{timer, S#d.strip_ms, strip}]};
timeout(anti_entropy, S = #d{ready = false}) ->
    {S1, Effs} = hm_dotted_churn:handoff_tick(S),
    {S1, Effs ++ [{timer, S#d.sync_ms, anti_entropy}]};
timeout(anti_entropy, S) ->
    {S1, Effs} = hm_dotted_sync:exchange(S),
    {S1, Effs ++ [{timer, S#d.sync_ms, anti_entropy}]};
timeout(_, S) -> {S, []}.

%%% ================================================================ peers' messages

%% @doc A message from another copy of the group. One from an id not in the group (a retired
%% copy) or of an unknown shape is dropped (`{drop, Reason}').
-spec handle(msg() | term(), state()) -> {state(), [effect()]}.
handle(Msg, S0) when is_tuple(Msg), tuple_size(Msg) >= 2 ->
    From = element(2, Msg),
    %% a newer incarnation of a copy (the sender, or one the sender names) supersedes the
    %% one known here
    S = hm_dotted_churn:learn([From | named_peers(Msg)], S0),
    case lists:member(From, S#d.peers) andalso From =/= S#d.id of
        false -> {S, [{drop, {not_a_peer, element(1, Msg), From}}]};
        true ->
            try remote(Msg, S)
            catch error:_ -> {S, [{drop, {bad_message, element(1, Msg), From}}]}
            end
    end;
handle(_, S) -> {S, [{drop, bad_message}]}.

%% a message of a well-formed shape, to the module of its concern
remote({replicate, _From, Key, Obj = {Vers, _}}, S) when is_map(Vers) ->
    {_, S1, Effs} = hm_dotted_store:update(Key, Obj, S),
    {S1, Effs};
remote({sync_clock, From, PPeers, NCp}, S) when is_list(PPeers) ->
    hm_dotted_sync:sync_clock(From, PPeers, NCp, S);
remote({transfer_req, From}, S) ->
    hm_dotted_churn:transfer_req(From, S);
remote({transfer_refused, From}, S) ->
    hm_dotted_churn:transfer_refused(From, S);
remote({sync_repair, From, PPeers, NCp, Objs0, Mode}, S) when is_list(Objs0) ->
    hm_dotted_sync:sync_repair(From, PPeers, NCp, Objs0, Mode, S);
remote({merkle, From, PPeers, NCp, Step}, S = #d{tree = T}) when T =/= undefined ->
    hm_dotted_sync:merkle(From, PPeers, NCp, Step, S);
remote({merkle_repair, From, PPeers, NCp, Objs, Want}, S0) when is_list(Want) ->
    hm_dotted_sync:merkle_repair(From, PPeers, NCp, Objs, Want, S0).

%% the copies a message's sender names as its group
named_peers(Msg) when element(1, Msg) =:= sync_clock; element(1, Msg) =:= sync_repair;
                      element(1, Msg) =:= merkle; element(1, Msg) =:= merkle_repair ->
    case element(3, Msg) of
        Ps when is_list(Ps) -> Ps;
        _ -> []
    end;
named_peers(_) -> [].

%%% ================================================================ churn

%% @doc The group is now `Peers', by address or id (a copy replaced by a new id, added or
%% removed; see "Incarnations" for addresses). Retired ids
%% leave the watermark; their dots stay in the node clock, which closes their gaps once every
%% remaining copy has shown it holds no dot of theirs this copy lacks.
-spec set_peers([id() | address()], state()) -> {state(), [effect()]}.
set_peers(Peers0, S = #d{id = Id, peers = Peers}) ->
    {hm_dotted_churn:set_ids(hm_dotted_churn:to_ids(Peers0, Id, Peers), S), []}.

%% @doc The address of a copy id: `A' for an incarnation `{A, Inc}' (`Inc' an integer),
%% else the id itself. Copies are sent messages at their address; a copy that restarts
%% without its state comes back at the same address under a higher incarnation.
-spec address(id()) -> address().
address({A, I}) when is_integer(I) -> A;
address(Id) -> Id.

%% @doc The incarnation of a copy id (0 for an id without one, and for a placeholder).
-spec incarnation(id()) -> non_neg_integer().
incarnation({_, I}) when is_integer(I) -> I;
incarnation(_) -> 0.

%%% ================================================================ inspection

%% @doc This copy's node id.
-spec id(state()) -> id().
id(#d{id = Id}) -> Id.

%% @doc The group's copies, this one included.
-spec peers(state()) -> [id()].
peers(#d{peers = P}) -> P.

%% @doc `ready', or `syncing' while a bootstrapping copy waits for its handoff.
-spec status(state()) -> ready | syncing.
status(#d{ready = true}) -> ready;
status(#d{ready = false}) -> syncing.

%% @doc The node clock.
-spec node_clock(state()) -> hm_node_clock:clock().
node_clock(#d{nc = NC}) -> NC.

%% @doc Storage: per key its versions (dot => `{v, Value}' or `null') and stripped context.
-spec objects(state()) -> #{term() => obj()}.
objects(#d{st = St}) -> St.

%% @doc What reads show: per stored key with a value, its values in dot order.
-spec values(state()) -> #{term() => [term()]}.
values(#d{st = St}) ->
    maps:filter(fun(_, V) -> V =/= [] end,
                maps:map(fun(_, {Vers, _}) -> hm_dotted_store:shown(Vers) end, St)).

%% @doc Node ids in the stored clock of `Key' (context and versions; 0 when not stored).
-spec clock_entries(term(), state()) -> non_neg_integer().
clock_entries(Key, #d{st = St}) ->
    case St of
        #{Key := {Vers, CC}} -> hm_dotted_store:entries(Vers, CC);
        _ -> 0
    end.

%% @doc Metadata sizes: node clock entries, dot-key map entries, watermark cells,
%% non-stripped keys, Merkle tree (inner hashes plus key-hash pairs), retired ids pending.
-spec metadata(state()) -> #{atom() => non_neg_integer()}.
metadata(#d{nc = NC, dkm = DKM, wm = WM, nsk = NSK, tree = T, retired = R}) ->
    #{node_clock => hm_node_clock:size(NC), dot_keys => map_size(DKM),
      watermark => lists:sum([map_size(V) || V <- maps:values(WM)]),
      non_stripped => map_size(NSK), retired => map_size(R),
      merkle => case T of undefined -> 0; _ -> hm_merkle:size(T) end}.

%% @doc Metadata sizes in bytes (external term format): what node-clock anti-entropy keeps
%% (node clock, dot-key map, watermark, non-stripped keys) and what Merkle anti-entropy keeps
%% (the tree).
-spec metadata_bytes(state()) -> #{node_clock_ae := non_neg_integer(),
                                   merkle_ae := non_neg_integer()}.
metadata_bytes(#d{nc = NC, dkm = DKM, wm = WM, nsk = NSK, tree = T}) ->
    #{node_clock_ae => erlang:external_size({NC, DKM, WM, NSK}),
      merkle_ae => case T of undefined -> 0; _ -> erlang:external_size(T) end}.

%% @doc The non-stripped keys.
-spec non_stripped(state()) -> [term()].
non_stripped(#d{nsk = NSK}) -> lists:sort(maps:keys(NSK)).

%% @doc The dot-key map.
-spec dot_keys(state()) -> #{dot() => term()}.
dot_keys(#d{dkm = DKM}) -> DKM.

%% @doc The Merkle tree (`undefined' with node-clock anti-entropy).
-spec tree(state()) -> hm_merkle:tree() | undefined.
tree(#d{tree = T}) -> T.

%% @doc `node_clock' or `merkle'.
-spec anti_entropy(state()) -> node_clock | merkle.
anti_entropy(#d{ae = AE}) -> AE.

%% @doc Bytes of an anti-entropy message's object payload (keys and objects), to split
%% traffic into object data and synchronisation metadata.
-spec object_bytes(msg() | term()) -> non_neg_integer().
object_bytes({sync_repair, _, _, _, Objs, _}) -> erlang:external_size(Objs);
object_bytes({merkle_repair, _, _, _, Objs, _}) -> erlang:external_size(Objs);
object_bytes(_) -> 0.
