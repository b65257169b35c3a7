%% @doc Which wire version this node sends EC tables' messages at ({@link hm_ec_wire},
%% "Versions"): it asks each member of the Mnesia cluster it is connected to which versions
%% it reads (`hm_ec_wire:versions/0' there; a release older than that function reads only
%% `hm_ec_wire:version/0''s), keeps the answers, and sends at the newest version all of
%% them read ({@link hm_ec_wire:negotiate/2}). The node's EC server calls {@link refresh/0}
%% every second: a member is asked once while it stays connected, in a process of its own
%% (a member slow to answer never holds up the caller), and forgotten once disconnected, so
%% a member restarted on another release is asked again. A member whose versions this node
%% cannot read at all is logged once.
-module(hm_ec_versions).

-export([init/0, refresh/0, known/0]).

-define(TAB, hm_ec_versions).
-define(ASK_MS, 5000).

%% @doc Create the table of known versions (by the EC server, at its start).
-spec init() -> ok.
init() ->
    _ = ets:new(?TAB, [set, public, named_table, {read_concurrency, true}]),
    ok.

%% @doc The versions of the members asked so far: `[{Node, {Oldest, Newest} | asking}]'.
-spec known() -> [{node(), hm_ec_wire:versions() | asking}].
known() -> lists:sort(ets:tab2list(?TAB)).

%% @doc Forget the members no longer connected, ask the new ones, and send at the version
%% the known ones agree on.
-spec refresh() -> ok.
refresh() ->
    Up = [N || N <- hm_membership:mnesia_list(db_nodes), lists:member(N, nodes())],
    _ = [ets:delete(?TAB, N) || {N, _} <- ets:tab2list(?TAB), not lists:member(N, Up)],
    New = [N || N <- Up, ets:insert_new(?TAB, {N, asking})],
    _ = [spawn(fun() -> ask(N) end) || N <- New],
    agree().

ask(Node) ->
    Vs = try erpc:call(Node, hm_ec_wire, versions, [], ?ASK_MS)
         catch error:{exception, undef, _} ->
                 try erpc:call(Node, hm_ec_wire, version, [], ?ASK_MS) of
                     V -> {V, V}
                 catch _:_ -> unknown
                 end;
               _:_ -> unknown
         end,
    case Vs of
        {O, W} when is_integer(O), is_integer(W) ->
            _ = ets:update_element(?TAB, Node, {2, {O, W}}),
            agree();
        _ -> ets:delete(?TAB, Node)                  % asked again at the next refresh
    end,
    ok.

agree() ->
    Own = hm_ec_wire:versions(),
    Peers = [{N, Vs} || {N, Vs = {_, _}} <- ets:tab2list(?TAB)],
    {V, Apart} = hm_ec_wire:negotiate(Own, Peers),
    _ = [logger:warning("hypermnesia: ~p reads wire versions ~p, this node ~p: their EC "
                        "tables cannot exchange operations", [N, Vs, Own],
                        #{domain => [hypermnesia]})
         || {N, Vs} <- Peers, lists:member(N, Apart), not logged(N, Vs)],
    hm_ec_wire:set_sending_version(V).

%% Whether `Node' was logged for versions `Vs' already; notes it if not.
logged(Node, Vs) ->
    Key = {?MODULE, logged, Node, Vs},
    case persistent_term:get(Key, false) of
        true -> true;
        false -> persistent_term:put(Key, true), false
    end.
